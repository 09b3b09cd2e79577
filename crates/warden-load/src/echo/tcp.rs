//! The TCP side of the echo server: writes back whatever it reads.

use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub(super) async fn serve(listener: TcpListener, shutdown: watch::Receiver<bool>) {
    let mut stop = shutdown;
    // Dropping the JoinSet on shutdown aborts every connection.
    let mut connections = JoinSet::new();
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
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = super::stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(async move {
            let (mut reader, mut writer) = stream.split();
            let _ = tokio::io::copy(&mut reader, &mut writer).await;
        });
    }
}
