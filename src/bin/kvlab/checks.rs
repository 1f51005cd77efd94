//! Range checks on the numbers a user types, before anything is computed or
//! allocated from them. Release builds do not check integer overflow, so a count of
//! 18446744073709551615 must be refused here, by name, not wrap into a small size
//! further down. Every message names the flag and the range it must be in. Not in
//! the book.

use kvlab::error::{Error, Result};

/// `value` (given as `flag`) must be in `min..=max`; `what` says what the flag counts
/// or where the bound comes from.
pub fn in_range(flag: &str, value: usize, min: usize, max: usize, what: &str) -> Result<()> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{flag} {value} is out of range ({what}): give {flag} between {min} and {max}"
    )))
}

/// `value` (given as `flag`) must be at least `min`.
pub fn at_least(flag: &str, value: usize, min: usize) -> Result<()> {
    if value >= min {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{flag} {value} is too small: give {flag} of at least {min}"
    )))
}

/// A duration in seconds (given as `flag`): finite, above 0, at most a day; as a
/// `Duration` (`Duration::from_secs_f64` panics on NaN, infinity or a negative value).
pub fn seconds(flag: &str, value: f64) -> Result<std::time::Duration> {
    if value.is_finite() && value > 0.0 && value <= 86_400.0 {
        return Ok(std::time::Duration::from_secs_f64(value));
    }
    Err(Error::InvalidArgument(format!(
        "{flag} {value} is not a time the server can keep: give {flag} in seconds, above 0 and at most 86400"
    )))
}

/// The sum of several flags' values, or an error naming them all when it overflows.
pub fn sum(parts: &[(&str, usize)]) -> Result<usize> {
    parts
        .iter()
        .try_fold(0usize, |acc, &(_, v)| acc.checked_add(v))
        .ok_or_else(|| {
            let names: Vec<String> = parts.iter().map(|(f, v)| format!("{f} {v}")).collect();
            Error::InvalidArgument(format!(
                "{} add up to more than a 64-bit count: give smaller values",
                names.join(" + ")
            ))
        })
}

/// Timed repetitions: enough for a median, few enough to finish (and to size the list of
/// timings without overflow).
pub const MAX_REPS: usize = 1000;
