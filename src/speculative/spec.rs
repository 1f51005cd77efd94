//! The spec a user names a drafter by (`ngram`, `ngram:3`, `early-exit:8`, `bf16`), and
//! the drafter each one builds. Kept apart from the [`Drafter`] trait so that the
//! drafters depend on the trait and this file on the drafters, never both ways.

use super::drafter::Drafter;
use super::early_exit::LmDrafter;
use super::ngram::NgramDrafter;
use crate::error::{Error, Result};
use crate::model::Model;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// A drafter by name, as the CLI will take it (`--drafter ngram:3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum DrafterSpec {
    /// Prompt lookup: the latest earlier occurrence of the last `n` tokens.
    Ngram { n: usize },
    /// The target's own first `layers` layers, then its final norm and LM head.
    EarlyExit { layers: usize },
    /// The whole target with every weight rounded to bf16 (and back to f32).
    Bf16,
}

/// The n-gram length `ngram` means without a number.
pub const DEFAULT_NGRAM: usize = 3;

impl FromStr for DrafterSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<DrafterSpec> {
        let (name, arg) = match s.split_once(':') {
            Some((name, arg)) => (name, Some(arg)),
            None => (s, None),
        };
        let number = |what: &str| -> Result<usize> {
            let arg = arg.ok_or_else(|| {
                Error::InvalidArgument(format!("drafter `{s}` needs {what}, e.g. `{name}:4`"))
            })?;
            match arg.parse::<usize>() {
                Ok(v) if v >= 1 => Ok(v),
                _ => Err(Error::InvalidArgument(format!(
                    "drafter `{s}`: {what} must be a whole number >= 1, got `{arg}`"
                ))),
            }
        };
        match name {
            "ngram" if arg.is_none() => Ok(DrafterSpec::Ngram { n: DEFAULT_NGRAM }),
            "ngram" => Ok(DrafterSpec::Ngram {
                n: number("an n-gram length")?,
            }),
            "early-exit" => Ok(DrafterSpec::EarlyExit {
                layers: number("a number of layers")?,
            }),
            "bf16" if arg.is_none() => Ok(DrafterSpec::Bf16),
            _ => Err(Error::InvalidArgument(format!(
                "unknown drafter `{s}`: use ngram, ngram:N, early-exit:L or bf16"
            ))),
        }
    }
}

impl fmt::Display for DrafterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DrafterSpec::Ngram { n } => write!(f, "ngram:{n}"),
            DrafterSpec::EarlyExit { layers } => write!(f, "early-exit:{layers}"),
            DrafterSpec::Bf16 => write!(f, "bf16"),
        }
    }
}

impl DrafterSpec {
    /// What [`DrafterSpec::build`] checks, without building (a bf16 copy takes a while).
    pub fn check(&self, target: &Model) -> Result<()> {
        match *self {
            DrafterSpec::EarlyExit { layers } => super::early_exit::check_exit(target, layers),
            DrafterSpec::Ngram { .. } | DrafterSpec::Bf16 => Ok(()),
        }
    }

    /// Builds the drafter for `target`. Checks what needs the model: an early exit must
    /// keep fewer layers than the model has (with all of them it *is* the target).
    pub fn build<'a>(&self, target: &'a Model) -> Result<Box<dyn Drafter + 'a>> {
        self.check(target)?;
        Ok(match *self {
            DrafterSpec::Ngram { n } => Box::new(NgramDrafter::new(n)?),
            DrafterSpec::EarlyExit { layers } => Box::new(LmDrafter::early_exit(target, layers)?),
            DrafterSpec::Bf16 => Box::new(LmDrafter::bf16_copy(target)?),
        })
    }
}
