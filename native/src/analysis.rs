//! The two index-side views of `search.text.analysis`, as scanners over UTF-8 bytes (no regex engine at run time).
//!
//! * word: tantivy 0.27's `SimpleTokenizer` (runs of `char::is_alphanumeric`), `RemoveLongFilter`, `LowerCaser`
//!   and the Snowball English `Stemmer` (frostem, the crate tantivy 0.27 stems with);
//! * symbol: `analysis.SYMBOL_PATTERN` read leftmost-first, as tantivy's `RegexTokenizer` reads it, then
//!   `RemoveLongFilter`; case kept, no stemming.
//!
//! Both return the tokens joined by single spaces: the string the embedded engine's whitespace tokenizer indexes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use frostem::{Algorithm, Stemmer};
use regex_syntax::hir::{Class, HirKind};

/// `RemoveLongFilter::limit(64)`: tantivy keeps a token whose UTF-8 length is *below* the limit
/// (`search.text.analysis.MAX_TOKEN_CHARS`), measured before lower-casing.
pub const MAX_TOKEN_BYTES: usize = 64;

/// Stems remembered per thread (token as written -> stem); emptied when full. Prose repeats a small vocabulary, so
/// most tokens skip lower-casing and Snowball. std's randomly keyed hasher: texts cannot be crafted to collide.
const STEM_CACHE_ENTRIES: usize = 100_000;

thread_local! {
    static STEMS: RefCell<HashMap<Box<str>, Box<str>>> = RefCell::new(HashMap::new());
}

/// Membership of `[\p{L}\p{N}]`: a bitmap over the Basic Multilingual Plane, sorted ranges above it.
struct LetterDigit {
    bmp: Vec<u64>,
    astral: Vec<(u32, u32)>,
}

impl LetterDigit {
    /// The class from regex-syntax's own tables (the version tantivy's regex crate uses), so the symbol view
    /// agrees with tantivy's `RegexTokenizer` on every code point.
    fn build() -> LetterDigit {
        let hir = regex_syntax::Parser::new()
            .parse(r"[\p{L}\p{N}]")
            .expect("a fixed, valid class");
        let HirKind::Class(Class::Unicode(class)) = hir.kind() else {
            panic!("[\\p{{L}}\\p{{N}}] parsed to something other than a Unicode class")
        };
        let mut bmp = vec![0u64; 0x10000 / 64];
        let mut astral = Vec::new();
        for range in class.ranges() {
            let (lo, hi) = (range.start() as u32, range.end() as u32);
            for cp in lo..=hi.min(0xFFFF) {
                bmp[(cp >> 6) as usize] |= 1 << (cp & 63);
            }
            if hi > 0xFFFF {
                astral.push((lo.max(0x10000), hi));
            }
        }
        LetterDigit { bmp, astral }
    }

    #[inline]
    fn contains(&self, cp: u32) -> bool {
        if cp < 0x10000 {
            self.bmp[(cp >> 6) as usize] & (1 << (cp & 63)) != 0
        } else {
            self.astral
                .binary_search_by(|&(lo, hi)| {
                    if hi < cp {
                        std::cmp::Ordering::Less
                    } else if lo > cp {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .is_ok()
        }
    }

    /// The end of the run of letters/digits that starts at `i` (`i` itself when there is none).
    #[inline]
    fn run_end(&self, b: &[u8], mut i: usize) -> usize {
        while i < b.len() {
            let (cp, len) = decode(b, i);
            if !self.contains(cp) {
                break;
            }
            i += len;
        }
        i
    }
}

fn letter_digit() -> &'static LetterDigit {
    static TABLE: OnceLock<LetterDigit> = OnceLock::new();
    TABLE.get_or_init(LetterDigit::build)
}

/// The code point starting at byte `i` of valid UTF-8 and its length in bytes.
#[inline(always)]
fn decode(b: &[u8], i: usize) -> (u32, usize) {
    let b0 = b[i] as u32;
    if b0 < 0x80 {
        (b0, 1)
    } else if b0 < 0xE0 {
        (((b0 & 0x1F) << 6) | (b[i + 1] as u32 & 0x3F), 2)
    } else if b0 < 0xF0 {
        (
            ((b0 & 0x0F) << 12) | ((b[i + 1] as u32 & 0x3F) << 6) | (b[i + 2] as u32 & 0x3F),
            3,
        )
    } else {
        let cp = ((b0 & 0x07) << 18)
            | ((b[i + 1] as u32 & 0x3F) << 12)
            | ((b[i + 2] as u32 & 0x3F) << 6)
            | (b[i + 3] as u32 & 0x3F);
        (cp, 4)
    }
}

/// `char::is_alphanumeric`, the split rule of tantivy's simple tokenizer, with an ASCII fast path.
#[inline(always)]
fn is_word_char(cp: u32) -> bool {
    if cp < 0x80 {
        (cp as u8).is_ascii_alphanumeric()
    } else {
        char::from_u32(cp).is_some_and(char::is_alphanumeric)
    }
}

/// Appends `token` to `out`, a space first unless it is the first token (`" ".join` of the token list).
#[inline]
fn push_token(out: &mut String, token: &str) {
    if !out.is_empty() {
        out.push(' ');
    }
    out.push_str(token);
}

/// The word view of `text`: simple tokenizer, remove-long, lower-case, Snowball English stem.
pub fn word_text(text: &str) -> String {
    let stemmer = Stemmer::new(Algorithm::English);
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut lower = String::with_capacity(MAX_TOKEN_BYTES * 2);
    STEMS.with_borrow_mut(|stems| {
        let mut i = 0;
        while i < b.len() {
            let (cp, len) = decode(b, i);
            if !is_word_char(cp) {
                i += len;
                continue;
            }
            let start = i;
            i += len;
            while i < b.len() {
                let (cp, len) = decode(b, i);
                if !is_word_char(cp) {
                    break;
                }
                i += len;
            }
            if i - start >= MAX_TOKEN_BYTES {
                continue;
            }
            let token = &text[start..i];
            if let Some(stem) = stems.get(token) {
                push_token(&mut out, stem);
                continue;
            }
            lower.clear();
            if token.is_ascii() {
                lower.push_str(token);
                lower.make_ascii_lowercase();
            } else {
                // tantivy's LowerCaser: char::to_lowercase, one char at a time (İ -> i̇, no final-sigma rule)
                lower.extend(token.chars().flat_map(char::to_lowercase));
            }
            let stem = stemmer.stem(&lower);
            push_token(&mut out, &stem);
            if stems.len() >= STEM_CACHE_ENTRIES {
                stems.clear();
            }
            stems.insert(token.into(), stem.into());
        }
    });
    out
}

/// The symbol view of `text`: `[\p{L}\p{N}]+(?:\([\p{L}\p{N}+:\-]+\)[\p{L}\p{N}]*|[\-+/:.][\p{L}\p{N}]+)*`
/// matched leftmost-first from left to right, then remove-long; case kept.
///
/// A match starts at the first letter/digit after the previous match and takes the whole run; then, as long as
/// one applies, it takes a parenthesised group (`(`, one or more letters/digits/`+:-`, `)`, then any letters/digits)
/// or one of `-+/:.` followed by a run of letters/digits. A `(` whose group does not close, or a separator not
/// followed by a letter/digit, ends the match before it (the regex backtracks to the same place), so `Su(H` yields
/// `Su` and `H`, and `(Su(H)),` yields `Su(H)`.
pub fn symbol_text(text: &str) -> String {
    let table = letter_digit();
    let b = text.as_bytes();
    let n = b.len();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < n {
        let (cp, len) = decode(b, i);
        if !table.contains(cp) {
            i += len;
            continue;
        }
        let start = i;
        i = table.run_end(b, i + len);
        while i < n {
            match b[i] {
                b'(' => {
                    let mut j = i + 1;
                    while j < n {
                        let (cp, len) = decode(b, j);
                        if !(table.contains(cp) || matches!(cp, 0x2B | 0x3A | 0x2D)) {
                            break;
                        }
                        j += len;
                    }
                    if j == i + 1 || j == n || b[j] != b')' {
                        break;
                    }
                    i = table.run_end(b, j + 1);
                }
                b'-' | b'+' | b'/' | b':' | b'.' => {
                    let after = table.run_end(b, i + 1);
                    if after == i + 1 {
                        break;
                    }
                    i = after;
                }
                _ => break,
            }
        }
        if i - start < MAX_TOKEN_BYTES {
            push_token(&mut out, &text[start..i]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_keep_gene_shapes() {
        assert_eq!(
            symbol_text("(Su(H)), E(spl)m8-HLH and l(2)gl."),
            "Su(H) E(spl)m8-HLH and l(2)gl"
        );
        assert_eq!(symbol_text("Su(H a(b x- 1.2.3"), "Su H a b x 1.2.3");
        assert_eq!(symbol_text("α-Cat Df(3L)ED4543"), "α-Cat Df(3L)ED4543");
    }

    #[test]
    fn words_are_lowercased_and_stemmed() {
        assert_eq!(
            word_text("Dogs are the bests! Su(H)"),
            "dog are the best su h"
        );
    }

    #[test]
    fn long_tokens_are_dropped_at_64_bytes() {
        let kept = "a".repeat(63);
        let dropped = "a".repeat(64);
        assert_eq!(
            symbol_text(&format!("{kept} {dropped} x")),
            format!("{kept} x")
        );
        // 32 two-byte letters are 64 bytes: dropped although only 32 chars
        assert_eq!(symbol_text(&format!("{} x", "é".repeat(32))), "x");
    }
}
