//! `gateway.accessLog` compiled: format, fields, output and sampling.

use std::sync::Arc;

use turnpike_config::{AccessLog, ConfigErrors, ConfigSet, Ratio};
use turnpike_snapshot::settings::{AccessLogSettings, LogField, LogFormat, LogOutput, ALL};
use turnpike_snapshot::Settings;

/// Sets `settings.access_log` from the `gateway:` document.
pub(crate) fn apply(set: &ConfigSet, settings: &mut Settings, errors: &mut ConfigErrors) {
    settings.access_log = match &set.gateway.access_log {
        None => Some(Arc::new(AccessLogSettings::default_json())),
        Some(AccessLog::Flag(f)) => f.0.then(|| Arc::new(AccessLogSettings::default_json())),
        Some(AccessLog::Settings(s)) => {
            let Some(origin) = &set.gateway_origin else {
                return;
            };
            let err =
                |key: &str, msg: String| origin.error(&format!("gateway.accessLog.{key}"), msg);
            let format = match s.format.as_deref() {
                None | Some("json") => LogFormat::Json,
                Some("common") => LogFormat::Common,
                Some("combined") => LogFormat::Combined,
                Some(other) => {
                    errors.push(err(
                        "format",
                        format!("`{other}` is not a format: `json`, `common` or `combined`"),
                    ));
                    return;
                }
            };
            let fields = match &s.fields {
                None => AccessLogSettings::default_json().fields,
                Some(_) if format != LogFormat::Json => {
                    errors.push(err(
                        "fields",
                        "fields choose what JSON lines hold; the common and combined formats are fixed".into(),
                    ));
                    return;
                }
                Some(list) => {
                    let mut out = Vec::new();
                    for (i, name) in list.iter().enumerate() {
                        match LogField::ALL.iter().find(|(n, _)| n == name) {
                            Some((_, f)) if !out.contains(f) => out.push(*f),
                            Some(_) => {
                                errors.push(err(
                                    &format!("fields[{i}]"),
                                    format!("`{name}` is listed twice"),
                                ));
                                return;
                            }
                            None => {
                                let known: Vec<&str> =
                                    LogField::ALL.iter().map(|(n, _)| *n).collect();
                                errors.push(err(
                                    &format!("fields[{i}]"),
                                    format!(
                                        "unknown field `{name}`, expected one of {}",
                                        known.join(", ")
                                    ),
                                ));
                                return;
                            }
                        }
                    }
                    out
                }
            };
            let output = match s.output.as_deref() {
                None | Some("stdout") => LogOutput::Stdout,
                Some("off") => return settings.access_log = None,
                Some(path) => {
                    let base = origin.file.parent().unwrap_or(std::path::Path::new("."));
                    let file = base.join(path);
                    match file.parent() {
                        Some(dir) if dir.as_os_str().is_empty() || dir.is_dir() => {}
                        _ => {
                            errors.push(err(
                                "output",
                                format!("the folder of {} does not exist", file.display()),
                            ));
                            return;
                        }
                    }
                    LogOutput::File(file)
                }
            };
            let sample = s.sample.clone().unwrap_or_default();
            let threshold = |r: &Option<Ratio>| -> Option<u64> {
                let share = match r {
                    None => return Some(ALL),
                    Some(Ratio::Number(n)) => *n,
                    Some(Ratio::Percent(p)) => {
                        p.strip_suffix('%')?.trim().parse::<f64>().ok()? / 100.0
                    }
                };
                (0.0..=1.0)
                    .contains(&share)
                    .then_some((share * ALL as f64) as u64)
            };
            let Some(errors_threshold) = threshold(&sample.errors) else {
                errors.push(err(
                    "sample.errors",
                    "must be a share from 0 to 1 (0% to 100%)".into(),
                ));
                return;
            };
            let Some(successes_threshold) = threshold(&sample.successes) else {
                errors.push(err(
                    "sample.successes",
                    "must be a share from 0 to 1 (0% to 100%)".into(),
                ));
                return;
            };
            Some(Arc::new(AccessLogSettings {
                format,
                fields,
                output,
                errors_threshold,
                successes_threshold,
            }))
        }
    };
}
