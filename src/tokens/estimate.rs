//! The built-in token estimate: zero configuration, one pass over the characters.
//!
//! The estimate mimics what a byte-level BPE tokenizer with a large vocabulary does with a text
//! (its pre-tokenizer splits text into words, digit groups, punctuation runs and whitespace;
//! BPE then merges each piece), without a vocabulary. The constants are calibrated on the
//! DeepSeek-V3 tokenizer; `docs/tokens.md` gives the rules and the measured error.
//!
//! - **Words** (runs of ASCII letters, split again at a lower→upper case change, as in
//!   `camelCase`): one token per segment, plus 0.1 per letter past the sixth; all-capital
//!   segments (`JSONL`) cost 0.35 per letter past the second; long capitalised segments
//!   (`Provenance`) 0.4 more. A single space or tab before a word rides along with it.
//! - **Glued punctuation**: a lone punctuation mark between a non-space and letters (`.push`,
//!   `_id`, `/end`) joins the word, adding 0.25 (three letters) or 0.5 (four or more).
//! - **Punctuation runs** (ASCII): one or two characters are one token, each further character
//!   0.4, past eight characters 0.1. JSON joints (only `"{}[],:`, with a quote: `":"`, `"},"`)
//!   are one token up to three characters, 0.6 per further character.
//! - **Numbers**: digits are cut in groups of three, one token per group; a space before a
//!   number is a token of its own.
//! - **Whitespace**: newlines are one token per 16, absorbed when up to four follow
//!   punctuation (`;\n\n`); indentation (whitespace no word takes) is one token per 64 spaces
//!   (a tab counts 8).
//! - **CJK**: per character: Han 0.6 (frequent two-character words are single tokens), Kana
//!   0.7, Hangul 0.85; CJK, full-width and typographic punctuation 1 each. A space before Han
//!   or Kana is a token of its own.
//! - **Other scripts**: letters of 2 UTF-8 bytes (accented Latin, Greek, Cyrillic, Hebrew,
//!   Arabic) 0.4, of 3–4 bytes (Indic, Thai, ...) 0.9; emoji and other symbols 1.5.
//!
//! Everything is integer arithmetic in thousandths of a token, rounded once at the end, so the
//! result is the same on every platform. A non-empty text is at least one token.

/// Costs, in thousandths of a token. Calibrated against the DeepSeek-V3 tokenizer on the
/// corpora in `tests/data/tokens/` (see `docs/tokens.md`).
mod cost {
    /// A word segment of up to [`WORD_FREE_LEN`] letters.
    pub const WORD: u64 = 1000;
    /// Letters a word segment holds before it starts to cost more.
    pub const WORD_FREE_LEN: u64 = 6;
    /// Each letter past [`WORD_FREE_LEN`].
    pub const WORD_EXTRA_LETTER: u64 = 100;
    /// Each letter past the second of an all-capitals segment (`JSONL`, `OVERHEAD`).
    pub const CAPS_EXTRA_LETTER: u64 = 350;
    /// A capitalised segment (`Provenance`) of [`CAP_LONG_LEN`] letters or more: such words are
    /// split more often than their lower-case forms.
    pub const CAP_LONG: u64 = 400;
    /// See [`CAP_LONG`].
    pub const CAP_LONG_LEN: u64 = 8;
    /// A punctuation character glued to a following word of three letters (`.len`).
    pub const GLUED_SHORT: u64 = 250;
    /// A punctuation character glued to a following word of four letters or more (`.push`).
    pub const GLUED_LONG: u64 = 500;
    /// A run of one or two punctuation characters.
    pub const PUNCT_PAIR: u64 = 1000;
    /// Each further punctuation character, up to [`PUNCT_DENSE_LEN`].
    pub const PUNCT_MORE: u64 = 400;
    /// Length past which a punctuation run (`-----`, `=====`) gets cheap.
    pub const PUNCT_DENSE_LEN: u64 = 8;
    /// Each punctuation character past [`PUNCT_DENSE_LEN`].
    pub const PUNCT_DENSE: u64 = 100;
    /// A JSON joint (`":"`, `","`, `"},"`: only `"{}[],:` and at least one quote) of up to
    /// three characters: JSON's common joints are single tokens.
    pub const JSON_JOINT: u64 = 1000;
    /// Each character of a JSON joint past the third.
    pub const JSON_JOINT_MORE: u64 = 600;
    /// A group of up to three digits.
    pub const DIGIT_GROUP: u64 = 1000;
    /// A whitespace token: a run of newlines, or indentation / a space that no word takes.
    pub const WHITESPACE: u64 = 1000;
    /// Newlines one whitespace token holds.
    pub const NEWLINES_PER_TOKEN: u64 = 16;
    /// Newlines that punctuation right before them absorbs (`;\n\n` is one token).
    pub const NEWLINES_ABSORBED: u64 = 4;
    /// Spaces one whitespace token holds.
    pub const SPACES_PER_TOKEN: u64 = 64;
    /// A tab counts as this many spaces towards [`SPACES_PER_TOKEN`].
    pub const TAB_WIDTH: u64 = 8;
    /// A Han ideograph.
    pub const HAN: u64 = 600;
    /// A Hiragana or Katakana character.
    pub const KANA: u64 = 700;
    /// A Hangul syllable or jamo.
    pub const HANGUL: u64 = 850;
    /// A CJK, full-width or typographic punctuation mark (`，。「」`, `“”‘’—…`).
    pub const CJK_PUNCT: u64 = 1000;
    /// A non-ASCII letter of 2 UTF-8 bytes (accented Latin, Greek, Cyrillic, Hebrew, Arabic).
    pub const LETTER_2B: u64 = 400;
    /// A non-ASCII letter of 3 or 4 UTF-8 bytes (Indic, Thai, ...).
    pub const LETTER_3B: u64 = 900;
    /// A non-ASCII symbol (emoji, arrows, box drawing, ...).
    pub const SYMBOL: u64 = 1500;
}

/// The character classes the scanner distinguishes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Lower,
    Upper,
    Digit,
    Space,
    Newline,
    Punct,
    Han,
    Kana,
    Hangul,
    WidePunct,
    Letter2,
    Letter3,
    Symbol,
}

fn classify(c: char) -> Class {
    match c {
        'a'..='z' => Class::Lower,
        'A'..='Z' => Class::Upper,
        '0'..='9' => Class::Digit,
        '\n' | '\r' => Class::Newline,
        ' ' | '\t' | '\x0b' | '\x0c' => Class::Space,
        '\0'..='\x7f' => {
            if c.is_ascii_control() {
                Class::Symbol
            } else {
                Class::Punct
            }
        }
        '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}' | '\u{f900}'..='\u{faff}' | '\u{20000}'..='\u{3134f}' => Class::Han,
        '\u{3040}'..='\u{30ff}' | '\u{31f0}'..='\u{31ff}' | '\u{ff66}'..='\u{ff9f}' => Class::Kana,
        '\u{ac00}'..='\u{d7af}' | '\u{1100}'..='\u{11ff}' | '\u{3130}'..='\u{318f}' => Class::Hangul,
        '\u{3000}'..='\u{303f}' | '\u{ff00}'..='\u{ff65}' | '\u{2010}'..='\u{205e}' => Class::WidePunct,
        '\u{300}'..='\u{36f}' => Class::Letter2, // combining accents
        _ if c.is_whitespace() => Class::Space,
        _ if c.is_alphanumeric() => {
            if (c as u32) < 0x800 {
                Class::Letter2
            } else {
                Class::Letter3
            }
        }
        _ => Class::Symbol,
    }
}

/// The scanner's state between characters.
struct Scan {
    /// Thousandths of a token so far.
    milli: u64,
    /// Class of the previous character (None at the start).
    prev: Option<Class>,
    /// Length of the current run: letters of the current word segment, digits, punctuation
    /// characters, or whitespace characters after the last newline of a whitespace run.
    run: u64,
    /// Lower-case letters in the current word segment.
    lowers: u64,
    /// The current punctuation run directly follows a space (the space rides along with it,
    /// and the run cannot glue to a following word).
    punct_after_space: bool,
    /// The current punctuation run holds only JSON structure characters (`"{}[],:`).
    json_only: bool,
    /// The current punctuation run holds a double quote.
    has_quote: bool,
    /// The current word segment starts with a glued punctuation character.
    glued: bool,
    /// The current whitespace run contains a newline.
    ws_newline: bool,
    /// Newlines in the current whitespace run.
    newlines: u64,
    /// The whitespace after the last newline of the current run contains a tab.
    ws_tab: bool,
    /// Class of the character before the current whitespace run.
    before_ws: Option<Class>,
}

impl Scan {
    fn new() -> Scan {
        Scan {
            milli: 0,
            prev: None,
            run: 0,
            lowers: 0,
            punct_after_space: false,
            json_only: false,
            has_quote: false,
            glued: false,
            ws_newline: false,
            newlines: 0,
            ws_tab: false,
            before_ws: None,
        }
    }

    fn word_segment(&self) -> u64 {
        let len = self.run;
        let base = if self.lowers == 0 && len >= 3 {
            cost::WORD + (len - 2) * cost::CAPS_EXTRA_LETTER
        } else {
            let capitalised = self.lowers + 1 == len && len >= cost::CAP_LONG_LEN;
            cost::WORD + len.saturating_sub(cost::WORD_FREE_LEN) * cost::WORD_EXTRA_LETTER + if capitalised { cost::CAP_LONG } else { 0 }
        };
        let glue = match (self.glued, len) {
            (false, _) | (true, 0..=2) => 0,
            (true, 3) => cost::GLUED_SHORT,
            (true, _) => cost::GLUED_LONG,
        };
        base + glue
    }

    fn punct_run(&self) -> u64 {
        let len = self.run;
        if self.json_only && self.has_quote {
            return cost::JSON_JOINT + len.saturating_sub(3) * cost::JSON_JOINT_MORE;
        }
        let mid = len.clamp(2, cost::PUNCT_DENSE_LEN) - 2;
        let dense = len.saturating_sub(cost::PUNCT_DENSE_LEN);
        cost::PUNCT_PAIR + mid * cost::PUNCT_MORE + dense * cost::PUNCT_DENSE
    }

    /// Closes the run of `prev` because a character of class `next` (None: end of text) follows.
    fn close(&mut self, prev: Class, next: Option<Class>) {
        let letter_next = matches!(next, Some(Class::Lower | Class::Upper));
        match prev {
            Class::Lower | Class::Upper => {
                self.milli += self.word_segment();
                self.glued = false;
            }
            Class::Digit => self.milli += self.run.div_ceil(3) * cost::DIGIT_GROUP,
            Class::Punct => {
                if letter_next && self.run == 1 && !self.punct_after_space {
                    // A lone punctuation mark right before letters is part of the word.
                    self.glued = true;
                } else {
                    self.milli += self.punct_run();
                }
            }
            Class::Space | Class::Newline => {
                if self.ws_newline {
                    // Punctuation absorbs a few newlines that follow it (`;\n\n`).
                    let absorbed =
                        matches!(self.before_ws, Some(Class::Punct | Class::WidePunct)) && self.newlines <= cost::NEWLINES_ABSORBED;
                    if !absorbed {
                        self.milli += self.newlines.div_ceil(cost::NEWLINES_PER_TOKEN) * cost::WHITESPACE;
                    }
                }
                // Whitespace after the last newline: one space or tab rides along with a
                // following word or punctuation; the rest is indentation, a token per chunk.
                let carried = matches!(
                    next,
                    Some(
                        Class::Lower
                            | Class::Upper
                            | Class::Punct
                            | Class::WidePunct
                            | Class::Symbol
                            | Class::Hangul
                            | Class::Letter2
                            | Class::Letter3
                    )
                );
                let standalone = self.run - u64::from(carried && self.run > 0);
                if standalone > 0 {
                    let width = if self.ws_tab { cost::TAB_WIDTH } else { 1 };
                    self.milli += (standalone * width).div_ceil(cost::SPACES_PER_TOKEN) * cost::WHITESPACE;
                }
            }
            // Per-character classes were charged as they came.
            _ => {}
        }
    }

    fn push(&mut self, c: char) {
        let class = classify(c);
        let prev = self.prev;
        let continues = match (prev, class) {
            (Some(Class::Lower), Class::Lower) | (Some(Class::Upper), Class::Lower | Class::Upper) => true,
            (Some(Class::Lower), Class::Upper) => false, // camelCase: a new segment
            (Some(Class::Space | Class::Newline), Class::Space | Class::Newline) => true,
            (Some(p), c) => p == c && matches!(c, Class::Digit | Class::Punct),
            (None, _) => false,
        };
        if continues {
            match class {
                Class::Newline => {
                    self.ws_newline = true;
                    self.newlines += 1;
                    self.run = 0; // only whitespace after the last newline counts
                    self.ws_tab = false;
                }
                _ => self.run += 1,
            }
        } else {
            if let Some(p) = prev {
                self.close(p, Some(class));
            }
            self.run = 1;
            self.lowers = 0;
            match class {
                Class::Space => {
                    self.before_ws = prev;
                    self.ws_newline = false;
                    self.newlines = 0;
                    self.ws_tab = false;
                }
                Class::Newline => {
                    self.before_ws = prev;
                    self.ws_newline = true;
                    self.newlines = 1;
                    self.ws_tab = false;
                    self.run = 0;
                }
                Class::Punct => {
                    self.punct_after_space = prev == Some(Class::Space);
                    self.json_only = true;
                    self.has_quote = false;
                }
                _ => {}
            }
        }
        if c == '\t' {
            self.ws_tab = true;
        }
        if class == Class::Punct {
            self.json_only &= matches!(c, '"' | '{' | '}' | '[' | ']' | ',' | ':');
            self.has_quote |= c == '"';
        }
        // Per-character costs.
        self.milli += match class {
            Class::Lower => {
                self.lowers += 1;
                0
            }
            Class::Han => cost::HAN,
            Class::Kana => cost::KANA,
            Class::Hangul => cost::HANGUL,
            Class::WidePunct => cost::CJK_PUNCT,
            Class::Letter2 => cost::LETTER_2B,
            Class::Letter3 => cost::LETTER_3B,
            Class::Symbol => cost::SYMBOL,
            _ => 0,
        };
        self.prev = Some(class);
    }

    fn finish(mut self) -> u64 {
        match self.prev {
            None => 0,
            Some(p) => {
                self.close(p, None);
                ((self.milli + 500) / 1000).max(1)
            }
        }
    }
}

/// Estimates the number of tokens in `text`, without a tokenizer.
///
/// Deterministic, allocation-free and linear in the text's length. Calibrated to be within
/// ±10 % of the DeepSeek-V3 tokenizer on English prose, source code and Chinese prose; the rules
/// are described in the module documentation and in `docs/tokens.md`. Empty text is 0 tokens,
/// any other text at least 1.
pub fn estimate_text(text: &str) -> u64 {
    let mut scan = Scan::new();
    for c in text.chars() {
        scan.push(c);
    }
    scan.finish()
}
