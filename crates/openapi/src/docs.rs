//! `/api-docs`.
