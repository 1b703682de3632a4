//! The HTTP listener: accepts connections up to `limits.http_connections_per_ip` per client
//! address (a connection over the limit gets a `429 Too Many Requests` with `Retry-After`
//! and is closed), and hands each handler the client's address ([`Peer`]).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::limits::{AddrPermit, PerAddress};

/// The client's address, as handlers receive it (`ConnectInfo<Peer>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// A TCP listener that counts connections per client address.
pub struct LimitedListener {
    inner: TcpListener,
    per_ip: Arc<PerAddress>,
}

impl LimitedListener {
    /// Wraps `inner`; `per_ip` caps the open connections of each client address.
    pub fn new(inner: TcpListener, per_ip: Arc<PerAddress>) -> Self {
        LimitedListener { inner, per_ip }
    }
}

/// A connection and the place it holds in its address's allowance.
pub struct Guarded {
    stream: TcpStream,
    _permit: AddrPermit,
}

/// What a refused connection is told before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\n\
Content-Type: text/plain\r\nContent-Length: 45\r\nConnection: close\r\n\r\n\
too many connections from this address; retry";

impl Listener for LimitedListener {
    type Io = Guarded;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Guarded, SocketAddr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    debug!("HTTP accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.per_ip.acquire(addr.ip()) {
                Ok(permit) => {
                    return (
                        Guarded {
                            stream,
                            _permit: permit,
                        },
                        addr,
                    );
                }
                Err(e) => {
                    debug!("HTTP {addr}: refused: {e}");
                    tokio::spawn(refuse(stream));
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Writes the 429 and closes, giving up after a second (a client that reads nothing).
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(REFUSAL).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

impl Connected<IncomingStream<'_, LimitedListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
