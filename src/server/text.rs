//! Token ids in, text out, piece by piece, cut at the first stop string (book: serving.md).
//!
//! Two things make streamed text harder than `decode(all ids)` at the end:
//! - a character can span several byte-level tokens: [`TextStream`] (the same one
//!   `kvlab generate` prints through) releases text only once it decodes without a broken
//!   character, so no chunk carries half a UTF-8 sequence;
//! - a stop string can span tokens (`"\n\n"` may arrive as `"\n"` then `"\n"`): text that
//!   could still be the start of a stop string is held back until the next piece decides.
//!   What was sent is then never something that must be taken back.

use crate::tokenizer::{TextStream, Tokenizer};

// ANCHOR: stop_matcher
/// Finds the first stop string in a stream of text pieces.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not released: it may be the start of a stop string.
    held: String,
    stopped: bool,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops,
            ..StopMatcher::default()
        }
    }

    /// Adds `piece`; returns the text that is now safe to send, and whether a stop string
    /// was found (then everything from it on is dropped, and later pieces too).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(piece);
        // The earliest match of any stop string ends the text.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.stopped = true;
            let mut out = std::mem::take(&mut self.held);
            out.truncate(at);
            return (out, true);
        }
        // Hold back the longest tail of the text that some stop string starts with.
        let keep = self.longest_partial_match();
        let release = self.held.len() - keep;
        let out = self.held[..release].to_string();
        self.held.drain(..release);
        (out, false)
    }

    /// The text still held at the end of generation: no stop string came.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Bytes at the end of `held` that are a proper prefix of a stop string.
    fn longest_partial_match(&self) -> usize {
        let mut longest = 0;
        for stop in &self.stops {
            for (end, _) in stop.char_indices().skip(1) {
                if end > longest && self.held.ends_with(&stop[..end]) {
                    longest = end;
                }
            }
        }
        longest
    }
}
// ANCHOR_END: stop_matcher

/// One request's text: ids → whole characters → cut at the first stop string.
pub struct Detokenizer<'t> {
    text: TextStream<'t>,
    stop: StopMatcher,
}

impl<'t> Detokenizer<'t> {
    pub fn new(tokenizer: &'t Tokenizer, stops: Vec<String>) -> Detokenizer<'t> {
        Detokenizer {
            text: TextStream::new(tokenizer),
            stop: StopMatcher::new(stops),
        }
    }

    /// Adds one generated token; returns the text to send now (maybe empty) and whether
    /// a stop string ended the request.
    pub fn push(&mut self, id: u32) -> (String, bool) {
        match self.text.push(id) {
            Some(piece) => self.stop.push(&piece),
            None => (String::new(), false),
        }
    }

    /// The text held back for a stop string that never came.
    pub fn finish(&mut self) -> String {
        self.stop.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        let mut stopped = false;
        for p in pieces {
            let (text, s) = m.push(p);
            out.push(text);
            stopped |= s;
        }
        (out, stopped, m.finish())
    }

    #[test]
    fn a_stop_string_split_across_pieces_is_found_and_cut() {
        let (out, stopped, rest) = run(&["\n\n"], &["Hello", "\n", "\nWorld"]);
        assert_eq!(out, vec!["Hello", "", ""]);
        assert!(stopped);
        assert_eq!(rest, "");
    }

    #[test]
    fn held_text_is_released_when_the_stop_string_does_not_follow() {
        let (out, stopped, rest) = run(&["END"], &["a E", "N", "x", "b EN"]);
        assert_eq!(out.concat() + &rest, "a ENxb EN");
        assert_eq!(out, vec!["a ", "", "ENx", "b "]);
        assert!(!stopped);
        assert_eq!(rest, "EN");
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        let (out, stopped, _) = run(&["world", "lo"], &["hello world"]);
        assert_eq!(out, vec!["hel"]);
        assert!(stopped);
    }

    #[test]
    fn multibyte_stop_strings_are_held_on_character_boundaries() {
        let (out, stopped, _) = run(&["你好"], &["说你", "好吗"]);
        assert_eq!(out, vec!["说", ""]);
        assert!(stopped);
        let (out, stopped, rest) = run(&["你好"], &["说你", "们"]);
        assert_eq!(out.concat() + &rest, "说你们");
        assert!(!stopped);
    }

    #[test]
    fn without_stop_strings_everything_passes_at_once() {
        let (out, stopped, rest) = run(&[], &["a", "b"]);
        assert_eq!(out, vec!["a", "b"]);
        assert!(!stopped);
        assert_eq!(rest, "");
    }
}
