//! `warden inject`: Kubernetes workloads (Pods, Deployments, StatefulSets, DaemonSets,
//! ReplicaSets, Jobs, CronJobs) written back with the sidecar added, as `istioctl kube-inject`
//! does: an init container running `warden capture` with the pod's
//! `traffic.sidecar.istio.io/*` annotations, and the `warden-proxy` container (uid 1337) with
//! its downward-API identity, config and mesh credentials.
//!
//! Documents are edited as text: the new lines are spliced in where the pod spec's lists and
//! maps begin, so every other byte of the input (comments, order, quoting, documents that are
//! not workloads) stays as it was. Injecting twice is injecting once: a pod template that has
//! the `sidecar.istio.io/status` annotation is left alone.

#![forbid(unsafe_code)]

pub mod capture_args;
pub mod cli;
mod emit;
pub mod inject;
pub mod pod_annotations;
pub mod probes;
pub mod sidecar;

pub use inject::{inject, InjectError, Injected};
pub use sidecar::SidecarSettings;
