//! One file per command family; each parses nothing (clap did) and prints through
//! `print/`.

pub mod attention;
pub mod batch;
pub mod bench;
pub mod cache;
pub mod chat;
pub mod eval;
pub mod evict;
pub mod generate;
pub mod gqa;
pub mod model;
pub mod record;
pub mod serve;
pub mod side_by_side;
pub mod speculative;
