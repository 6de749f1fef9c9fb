//! Telemetry for the data plane: counters that each worker writes into its own cache lines
//! (no lock, no shared cache line, no atomic read-modify-write on the hot path) and that a scrape
//! sums over the workers ([`stats`]), their exposition in the Prometheus text format and in
//! OpenMetrics with exemplars ([`metrics`]).
//!
//! Every label comes from the configuration (API, upstream, node, listener and policy names)
//! or from a closed list (methods, status classes, outcomes, problem kinds), so the number of
//! series is bounded by the configuration, whatever clients send.

pub mod lines;
pub mod metrics;
pub mod stats;
pub mod trace;
