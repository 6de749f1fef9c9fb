//! `delay` of the mocking policies (`return`, `static`): the outcome of a step, held back for a
//! while without holding a thread (the step waits like one doing I/O), so that a mocked backend
//! answers as slowly as the real one.

use std::time::Duration;

use turnpike_core::{CompileError, Outcome, Resume, Wait};

use crate::err;

/// The longest delay (a mock that waits longer is a mistake).
pub const MAX: Duration = Duration::from_secs(300);

/// Checks a configured delay.
pub fn check(
    d: Option<turnpike_config::units::Duration>,
) -> Result<Option<Duration>, CompileError> {
    match d {
        None => Ok(None),
        Some(d) if d.0 > MAX => Err(err("delay", "at most 5 minutes")),
        Some(d) if d.0.is_zero() => Ok(None),
        Some(d) => Ok(Some(d.0)),
    }
}

/// `outcome`, applied after `delay`.
pub fn after(delay: Duration, outcome: Outcome) -> Outcome {
    let slot = std::rc::Rc::new(std::cell::Cell::new(Some(outcome)));
    let late = slot.clone();
    Outcome::Wait(Wait::new(
        async move {
            tokio::time::sleep(delay).await;
            Box::new(move |_: &mut turnpike_core::Exchange| {
                slot.take().unwrap_or(Outcome::Continue)
            }) as Resume
        },
        // The wait's own bound: a little past the delay.
        delay + Duration::from_secs(1),
        move |_| late.take().unwrap_or(Outcome::Continue),
    ))
}
