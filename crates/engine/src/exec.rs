//! The executor hyper runs its background tasks on (HTTP/2 streams, backend connections): the
//! worker's own thread, as local tasks.

/// Runs hyper tasks (HTTP/2 streams, backend connections) on the worker's own thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: std::future::Future + 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}
