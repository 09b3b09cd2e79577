//! AuthorizationPolicy evaluation: compiled CIDR sets and rule matching. Pure, no I/O.
