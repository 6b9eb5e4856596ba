//! `flysift_native`: the optional compiled backend of `search.text.tokens` (index-side analysis).
//!
//! Each function returns the tokens of one view joined by single spaces, equal to
//! `" ".join(search.text.analysis.analyze(view, text))`; the scan runs without the GIL.

mod analysis;

use pyo3::prelude::*;

/// The word view of `text`: tantivy's simple tokenizer, remove-long(64), lower-case, English Snowball stem.
#[pyfunction]
fn word_text(py: Python<'_>, text: &str) -> String {
    py.detach(|| analysis::word_text(text))
}

/// The symbol view of `text`: gene-symbol-shaped tokens (`Su(H)`, `E(spl)m8-HLH`), case kept, remove-long(64).
#[pyfunction]
fn symbol_text(py: Python<'_>, text: &str) -> String {
    py.detach(|| analysis::symbol_text(text))
}

#[pymodule]
fn flysift_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(word_text, m)?)?;
    m.add_function(wrap_pyfunction!(symbol_text, m)?)?;
    m.add("MAX_TOKEN_BYTES", analysis::MAX_TOKEN_BYTES)?;
    // the tantivy-py release whose analyzers this mirrors (its stemmer and Unicode tables); search.text.tokens
    // falls back to the Python backend when another tantivy is installed
    m.add("TANTIVY_VERSION", "0.27.0")?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
