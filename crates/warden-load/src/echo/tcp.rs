//! The TCP side of the echo server: writes back whatever it reads.

use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub(super) async fn serve(listener: TcpListener, shutdown: watch::Receiver<bool>) {
    let mut stop = shutdown.clone();
    loop {
        let (mut stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(err) => {
                    tracing::warn!(%err, "tcp echo: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = super::stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let (mut reader, mut writer) = stream.split();
            tokio::select! {
                _ = tokio::io::copy(&mut reader, &mut writer) => {}
                _ = super::stopped(&mut stop) => {}
            }
        });
    }
}
