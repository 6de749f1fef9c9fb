//! The admin API and console as a service for flows (Membrane's `adminConsole` policy): each
//! request is answered on a thread of its own, so that a reload it asks for (which compiles the
//! whole configuration) never holds up a data-plane worker.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use turnpike_core::admin_hook::{AdminFuture, AdminService};

use crate::Admin;

/// [`Admin`] answering requests that reach it through a flow. It holds the admin weakly: the
/// gateway's control plane owns it, and a stopped gateway's admin answers no more.
pub struct FlowService(pub Weak<Admin>);

impl AdminService for FlowService {
    fn call(&self, req: http::Request<Bytes>) -> AdminFuture {
        let Some(admin) = self.0.upgrade() else {
            return Box::pin(async {
                let mut r = http::Response::new(Bytes::new());
                *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                r
            });
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("turnpike-admin-flow".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("cannot start a runtime for an admin request: {e}");
                        return;
                    }
                };
                let answer = rt.block_on(async move {
                    let (parts, body) = req.into_parts();
                    let r = crate::routes::handle(
                        admin,
                        http::Request::from_parts(parts, Full::new(body)),
                    )
                    .await;
                    let (parts, body) = r.into_parts();
                    let bytes = body
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    http::Response::from_parts(parts, bytes)
                });
                let _ = tx.send(answer);
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread for an admin request: {e}");
        }
        Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                let mut r = http::Response::new(Bytes::new());
                *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                r
            })
        })
    }
}

/// Installs `admin` as the process's admin service for flows (while the caller keeps it).
pub fn install(admin: &Arc<Admin>) {
    turnpike_core::admin_hook::install(Arc::new(FlowService(Arc::downgrade(admin))));
}
