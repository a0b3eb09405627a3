//! flowlab's one HTTP listener per process. Each feature adds its routes to one
//! [`Routes`] (a server's metrics now; pages and speed-test endpoints to come), and the
//! process serves them all from one address, on a thread of their own running an async
//! runtime, beside its blocking servers.
//!
//! The listener is bound before it serves ([`Listener::bind`]), so a port in use is said
//! at once, on the terminal, before a daemon detaches; serving starts a thread
//! ([`Listener::serve`]), which a daemon does only once detached.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::header::CONTENT_TYPE;
use axum::routing::get;

/// What a route answers: a body made when asked.
type Body = Arc<dyn Fn() -> String + Send + Sync>;

/// The routes of a process's listener.
#[derive(Debug, Default)]
pub struct Routes {
    router: axum::Router,
}

impl Routes {
    pub fn new() -> Routes {
        Routes::default()
    }

    /// `GET path` answers `body()`, made anew for each request, as `content_type`.
    pub fn text(
        self,
        path: &str,
        content_type: &'static str,
        body: impl Fn() -> String + Send + Sync + 'static,
    ) -> Routes {
        let body: Body = Arc::new(body);
        let handler = get(move || {
            let body = body.clone();
            async move { ([(CONTENT_TYPE, content_type)], body()) }
        });
        Routes {
            router: self.router.route(path, handler),
        }
    }
}

/// A bound listener, not yet serving.
#[derive(Debug)]
pub struct Listener {
    socket: std::net::TcpListener,
}

impl Listener {
    /// Binds `addr` (port 0: any free port).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Listener> {
        let socket = std::net::TcpListener::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(Listener { socket })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Serves `routes` on a thread of its own until the returned [`Serving`] is dropped.
    pub fn serve(self, routes: Routes) -> std::io::Result<Serving> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let socket = self.socket;
        let thread = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(socket) {
                        Ok(l) => l,
                        Err(e) => return eprintln!("flowlab: the HTTP listener: {e}"),
                    };
                    let served = axum::serve(listener, routes.router)
                        .with_graceful_shutdown(async move {
                            let _ = stopped.await;
                        })
                        .await;
                    if let Err(e) = served {
                        eprintln!("flowlab: the HTTP listener: {e}");
                    }
                });
            })?;
        Ok(Serving {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// A listener serving; dropped, it stops (requests under way are let finish).
#[derive(Debug)]
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A raw HTTP/1.1 GET of `path` from `addr`: the whole response.
    fn get(addr: SocketAddr, path: &str) -> String {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: flowlab\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("response");
        response
    }

    /// A route answers with its body, made anew each time, and its content type; a path
    /// with no route is not found; once stopped, nothing listens.
    #[test]
    fn a_route_answers_each_request_anew_and_stops_with_its_listener() {
        let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = asked.clone();
        let routes = Routes::new().text("/count", "text/plain; charset=utf-8", move || {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            format!("asked {n} times\n")
        });
        let listener = Listener::bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let addr = listener.local_addr().expect("address");
        let serving = listener.serve(routes).expect("serve");
        for n in 1..=2 {
            let r = get(addr, "/count");
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
            assert!(
                r.to_ascii_lowercase()
                    .contains("content-type: text/plain; charset=utf-8\r\n"),
                "{r}"
            );
            assert!(r.ends_with(&format!("\r\n\r\nasked {n} times\n")), "{r}");
        }
        let r = get(addr, "/nothing");
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        drop(serving);
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still listening"
        );
    }

    /// An address in use is said at bind, before anything serves.
    #[test]
    fn an_address_in_use_is_refused_at_bind() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("address");
        let err = Listener::bind(addr).expect_err("in use");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    }
}
