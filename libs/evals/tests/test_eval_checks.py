"""The rule checks of instructions tasks: each one passes and fails where it should,
says what to fix, and a malformed check is refused naming its field."""

from __future__ import annotations

import pytest

from loop_agents_evals.checks import (
    CHECKS,
    Check,
    CheckSpecError,
    checks_feedback,
    parse_check,
    run_checks,
    sentences,
    words,
)

# (check, an answer that passes, an answer that fails, a phrase of the failure's feedback)
CASES = [
    ({"check": "word_count", "min": 3, "max": 5}, "one two three four", "one two", "3 to 5 words"),
    ({"check": "word_count", "max": 2}, "Hello, world!", "well-known don't panic", "at most 2"),
    (
        {"check": "sentence_count", "min": 2, "max": 2},
        "It rains. We stay in!",
        "It rains.",
        "exactly 2",
    ),
    ({"check": "line_count", "min": 3}, "a\n\nb\nc", "a\n  \nb", "at least 3 lines"),
    ({"check": "paragraph_count", "max": 1}, "One block\nof text.", "One.\n\nTwo.", "at most 1"),
    ({"check": "char_count", "max": 10}, "  short  ", "far too long for this", "at most 10"),
    (
        {"check": "include_words", "words": ["river", "old stone"]},
        "The river and an Old  Stone.",
        "A riverbank of stones.",
        "'river', 'old stone'",
    ),
    (
        {"check": "forbidden_words", "words": ["very"]},
        "Everything is fine.",
        "It is Very good.",
        "'very'",
    ),
    (
        {"check": "word_frequency", "word": "rain", "min": 2},
        "Rain, rain, go away.",
        "Rain and rainbows.",
        "'rain'",
    ),
    (
        {"check": "starts_with", "text": "Dear team,"},
        "\n Dear team, hello.",
        "Hi team,",
        "'Dear team,'",
    ),
    (
        {"check": "ends_with", "text": "Best regards."},
        "Thanks.\nBest regards.\n",
        "Best regards. Bye",
        "'Best regards.'",
    ),
    (
        {"check": "json", "keys": ["name", "year"]},
        '```json\n{"name": "x", "year": 1}\n```',
        '{"name": "x"}',
        "'year'",
    ),
    ({"check": "json"}, "[1, 2]", "Here: [1, 2]", "does not parse"),
    (
        {"check": "bullet_count", "min": 2, "max": 2},
        "- a\n* b\nc",
        "- a\n-b",
        "exactly 2 bullet points",
    ),
    ({"check": "numbered_count", "min": 3}, "1. a\n2) b\n3. c", "1. a\n2. b", "at least 3"),
    ({"check": "case", "case": "lower"}, "all lower, 42!", "Not lower", "lowercase"),
    ({"check": "case", "case": "upper"}, "LOUD AND CLEAR", "LOUD and CLEAR", "uppercase"),
    (
        {"check": "placeholders", "min": 2},
        "Dear [name], at [place].",
        "Dear [name], see [link](http://x).",
        "at least 2",
    ),
    (
        {"check": "sections", "prefix": "Part", "count": 2},
        "Part 1\nabc\nPart 2\ndef",
        "Part 1\nabc\nPart 3",
        "'Part 1', 'Part 2'",
    ),
    ({"check": "no_commas"}, "No commas here.", "Yes, one.", "commas"),
    ({"check": "title"}, "<<Spring Rain>>\nIt rained.", "<< >> no title", "<<"),
    ({"check": "quoted"}, ' "All of it." ', '"Half of it.', "double quotation"),
    ({"check": "capital_words", "max": 1}, "Use NASA data. I agree.", "USE NASA DATA", "at most 1"),
    (
        {"check": "postscript", "marker": "P.S."},
        "Hello.\n\nP.S. Bring tea.",
        "P.S. first\n\nthen text",
        "'P.S.'",
    ),
    (
        {"check": "highlights", "min": 2},
        "A *bold* and **strong** claim.",
        "* a bullet\n*one*",
        "at least 2",
    ),
]


@pytest.mark.parametrize(("spec", "good", "bad", "phrase"), CASES, ids=lambda v: str(v)[:30])
def test_each_check_passes_and_fails_with_feedback(spec, good, bad, phrase):
    check = parse_check(spec)
    assert check.run(good).passed, check.run(good).feedback
    result = check.run(bad)
    assert not result.passed
    assert phrase in result.feedback


def test_the_vocabulary_is_closed_and_large_enough():
    assert len(CHECKS) >= 12
    covered = {spec["check"] for spec, *_ in CASES}
    assert covered == set(CHECKS)  # every check is tested above


def test_counting_rules():
    assert words("Don't use well-known words: 3 of them, e.g. ") == [
        "Don't",
        "use",
        "well-known",
        "words",
        "3",
        "of",
        "them",
        "e",
        "g",
    ]
    assert sentences("First one. Second one!\nA line\n... ?") == [
        "First one",
        "Second one",
        "A line",
    ]


def test_feedback_lists_every_failure_and_asks_for_the_whole_answer():
    checks = [Check.of("no_commas"), Check.of("word_count", max=2), Check.of("case", case="lower")]
    text = checks_feedback(run_checks(checks, "yes, three words"))
    assert text.splitlines()[0] == "The answer breaks 2 requirements:"
    assert "commas; the answer has 1" in text
    assert "at most 2 words; the answer has 3" in text
    assert text.endswith("Reply with the complete revised answer, and nothing else.")
    assert checks_feedback(run_checks(checks, "ok then")) == ""


def test_phrases_match_whole_words_only():
    check = Check.of("forbidden_words", words=["cat"])
    assert check.run("A category of concatenated words.").passed
    assert not check.run("The CAT sat.").passed


def test_a_check_round_trips_through_json():
    check = parse_check({"check": "sections", "prefix": "Step", "count": 3})
    assert parse_check(check.to_json()) == check


@pytest.mark.parametrize(
    ("spec", "field", "phrase"),
    [
        ("word_count", "", "must be an object"),
        ({"max": 3}, "check", "known check"),
        ({"check": "wordcount", "max": 3}, "check", "word_count"),
        ({"check": "word_count"}, "", "at least one of max, min"),
        ({"check": "word_count", "max": -1}, "max", ">= 0"),
        ({"check": "word_count", "max": 2.5}, "max", "whole number"),
        ({"check": "word_count", "max": True}, "max", "whole number"),
        ({"check": "word_count", "min": 5, "max": 3}, "max", "below min"),
        ({"check": "word_count", "maximum": 3}, "maximum", "min, max"),
        ({"check": "include_words"}, "words", "required"),
        ({"check": "include_words", "words": []}, "words", "non-empty list"),
        ({"check": "include_words", "words": "river"}, "words", "non-empty list"),
        ({"check": "include_words", "words": ["ok", "!!"]}, "words[1]", "word or phrase"),
        ({"check": "word_frequency", "word": "two words", "min": 1}, "word", "one word"),
        ({"check": "case", "case": "title"}, "case", '"lower" or "upper"'),
        ({"check": "starts_with", "text": "  "}, "text", "non-empty"),
        ({"check": "sections", "prefix": "Part", "count": 0}, "count", "at least 1"),
        ({"check": "no_commas", "max": 0}, "max", "none"),
        ({"check": "json", "keys": [1]}, "keys[0]", "a string"),
    ],
)
def test_malformed_checks_name_the_field(spec, field, phrase):
    with pytest.raises(CheckSpecError) as caught:
        parse_check(spec)
    assert caught.value.field == field
    assert phrase in caught.value.problem


def test_the_documentation_lists_every_check():
    from tests.conftest import ROOT

    page = (ROOT / "docs" / "eval.md").read_text(encoding="utf-8")
    listed = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    assert set(CHECKS) <= listed
