//! Local rate limit stage (issue 4).
