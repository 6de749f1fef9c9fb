//! The admin API and console as a service for flows (Membrane's `adminConsole` policy): the
//! requests are answered on one thread of their own, started with the service and ended with
//! it, so that a reload one asks for (which compiles the whole configuration) never holds up a
//! data-plane worker, and no request starts a thread or a runtime.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::{mpsc, oneshot};
use turnpike_core::admin_hook::{AdminFuture, AdminService};

use crate::Admin;

/// A request for the admin thread, and where its answer goes.
type Job = (http::Request<Bytes>, oneshot::Sender<http::Response<Bytes>>);

/// [`Admin`] answering requests that reach it through a flow. It holds the admin weakly: the
/// gateway's control plane owns it, and a stopped gateway's admin answers no more.
pub struct FlowService {
    jobs: mpsc::UnboundedSender<Job>,
}

impl FlowService {
    /// The service of `admin`, with its thread.
    pub fn start(admin: Weak<Admin>) -> std::io::Result<FlowService> {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        std::thread::Builder::new()
            .name("turnpike-admin-flow".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("the admin service for flows cannot start: {e}");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    // Ends when the service (the sender) is dropped.
                    while let Some((req, tx)) = rx.recv().await {
                        let Some(admin) = admin.upgrade() else {
                            let _ = tx.send(status(http::StatusCode::SERVICE_UNAVAILABLE));
                            continue;
                        };
                        tokio::task::spawn_local(async move {
                            let _ = tx.send(answer(admin, req).await);
                        });
                    }
                });
            })?;
        Ok(FlowService { jobs })
    }
}

/// An empty answer with `s`.
fn status(s: http::StatusCode) -> http::Response<Bytes> {
    let mut r = http::Response::new(Bytes::new());
    *r.status_mut() = s;
    r
}

/// The admin API's answer to `req`, its body collected.
async fn answer(admin: Arc<Admin>, req: http::Request<Bytes>) -> http::Response<Bytes> {
    let (parts, body) = req.into_parts();
    let r = crate::routes::handle(admin, http::Request::from_parts(parts, Full::new(body))).await;
    let (parts, body) = r.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    http::Response::from_parts(parts, bytes)
}

impl AdminService for FlowService {
    fn call(&self, req: http::Request<Bytes>) -> AdminFuture {
        let (tx, rx) = oneshot::channel();
        if self.jobs.send((req, tx)).is_err() {
            return Box::pin(async { status(http::StatusCode::SERVICE_UNAVAILABLE) });
        }
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| status(http::StatusCode::INTERNAL_SERVER_ERROR))
        })
    }
}

/// Installs `admin` as the process's admin service for flows (while the caller keeps it).
pub fn install(admin: &Arc<Admin>) {
    match FlowService::start(Arc::downgrade(admin)) {
        Ok(service) => turnpike_core::admin_hook::install(Arc::new(service)),
        Err(e) => tracing::error!("the admin service for flows cannot start: {e}"),
    }
}
