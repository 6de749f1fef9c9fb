//! Errors of a flow entry's settings, placed at their key below the entry (`flow[2].if.test`).

use turnpike_config::{ConfigErrors, Located};

/// `key` below `at` (`at[0]` for an index, `at.key` for a field, `at` itself for `""`).
pub(crate) fn join(at: &str, key: &str) -> String {
    match key {
        "" => at.to_owned(),
        k if k.starts_with('[') => format!("{at}{k}"),
        k => format!("{at}.{k}"),
    }
}

/// The errors of the settings at key `at` of `owner`, each at its key below `at`.
pub(crate) fn push_errors<T>(
    owner: &Located<T>,
    at: &str,
    es: Vec<turnpike_core::CompileError>,
    errors: &mut ConfigErrors,
) {
    for e in es {
        let key = join(at, &e.key);
        errors.push(if e.at_key {
            owner.error_at_key(&key, e.message)
        } else {
            owner.error(&key, e.message)
        });
    }
}
