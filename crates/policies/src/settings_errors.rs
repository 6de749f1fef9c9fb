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
        let message = with_membrane_alternative(e.message);
        errors.push(if e.at_key {
            owner.error_at_key(&key, message)
        } else {
            owner.error(&key, message)
        });
    }
}

/// Membrane's settings that need a database or Java, which Turnpike does not have, and what to
/// use instead.
const MEMBRANE_SETTINGS: &[(&str, &str)] = &[
    ("mongoDBApiKeyStore", "API keys in MongoDB are not supported: list them in `simple` or an `apiKeyFileStore`, or as consumers' credentials"),
    ("databaseApiKeyStore", "API keys in a database are not supported: list them in `simple` or an `apiKeyFileStore`, or as consumers' credentials"),
    ("jdbcUserDataProvider", "users in a database are not supported: list them in `users`, an htpasswd file (`htpasswdFileProvider`) or as consumers' credentials"),
];

/// `message`, with the alternative when it is about one of [`MEMBRANE_SETTINGS`] (see
/// `docs/membrane.md`).
fn with_membrane_alternative(message: String) -> String {
    for (name, instead) in MEMBRANE_SETTINGS {
        if message.contains(&format!("`{name}`")) {
            return format!("Membrane's `{name}`: {instead} (see docs/membrane.md)");
        }
    }
    message
}

#[cfg(test)]
mod tests {
    #[test]
    fn membranes_database_settings_name_the_alternative() {
        let m = super::with_membrane_alternative(
            "unknown variant `mongoDBApiKeyStore`, expected one of `keys`".into(),
        );
        assert!(
            m.starts_with("Membrane's `mongoDBApiKeyStore`: API keys in MongoDB"),
            "{m}"
        );
        assert_eq!(super::with_membrane_alternative("other".into()), "other");
    }
}
