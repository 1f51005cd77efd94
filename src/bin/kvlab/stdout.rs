//! Writing to stdout like a good Unix tool: when the reader goes away
//! (`kvlab generate ... | head -c 20`), stop quietly instead of panicking.
//!
//! `println!` panics when stdout is a closed pipe ("failed printing to stdout: Broken
//! pipe", exit 101). Every line kvlab prints goes through [`outln!`] / [`out!`] instead:
//! a broken pipe ends the process at once with [`EXIT_BROKEN_PIPE`] and no message
//! (what `cat` or `yes` killed by SIGPIPE report to the shell), any other write error
//! (a full disk) is an `error:` line and exit 1. Not in the book.

use std::io::Write;

/// Exit status when stdout was closed before kvlab finished writing: 128 + SIGPIPE (13),
/// the status a shell shows for a tool killed by the signal.
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// Writes `args` to stdout and flushes (a streamed token must show at once).
pub fn write(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        failed(e);
    }
}

fn failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(EXIT_BROKEN_PIPE);
    }
    eprintln!("error: cannot write to stdout: {e}: check where the output goes (a full disk?)");
    std::process::exit(1);
}

/// `println!`, but a closed stdout ends kvlab quietly (see the module header).
macro_rules! outln {
    () => {
        $crate::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!`, flushed, with [`outln!`]'s handling of a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}
