//! The TCP side of the echo server: writes back whatever it reads.

use tokio::net::TcpListener;
use tokio::sync::watch;

pub(super) async fn serve(listener: TcpListener, stop: watch::Receiver<bool>) {
    super::accept_loop(listener, stop, |mut stream, _peer| async move {
        let (mut reader, mut writer) = stream.split();
        let _ = tokio::io::copy(&mut reader, &mut writer).await;
    })
    .await
}
