"""Sentence segmentation with bounded segment length."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handler.segmenter import split_sentences


def test_splits_on_sentence_ends_and_newlines():
    text = 'The birch canoe slid. Glue the sheet! Is it "easy?" Yes\nNew line here'
    assert split_sentences(text, max_chars=400) == [
        "The birch canoe slid.", "Glue the sheet!", 'Is it "easy?"', "Yes", "New line here",
    ]


def test_long_sentence_cut_at_comma_then_space():
    text = "alpha beta gamma, delta epsilon zeta eta theta"
    assert split_sentences(text, max_chars=20) == ["alpha beta gamma,", "delta epsilon zeta", "eta theta"]


def test_blank_text_and_bad_limit():
    assert split_sentences("  \n ", max_chars=10) == []
    with pytest.raises(ValueError):
        split_sentences("x", max_chars=0)


@given(st.text(alphabet="ab .,!?\n", max_size=300), st.integers(min_value=1, max_value=40))
def test_segments_bounded_and_keep_every_word(text, max_chars):
    segments = split_sentences(text, max_chars=max_chars)
    assert all(0 < len(s) <= max_chars for s in segments)
    assert "".join(segments).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
