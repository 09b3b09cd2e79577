//! AuthorizationPolicy stage (issue 3).
