"""Long options: a trie as deep as its longest answer compiles without recursion and is read exactly on
the real model; an option over `MAX_OPTION_TOKENS` is refused with one line naming it."""

from __future__ import annotations

import copy
import math
import pickle

import pytest

from decisionflow.compiler import ReadMode, TokenizerView, compile_rubric
from decisionflow.compiler.trie import MAX_OPTION_TOKENS, TrieNode, _flat_trie
from decisionflow.errors import CompileError
from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.runtime.passes.model_forward import PlainForwardBackend
from decisionflow.runtime.readout.debias import Debias
from decisionflow.spec.rubric import Rubric

pytestmark = pytest.mark.model

TEXT = "The basket on the table holds one pear and nothing else."


def words(count: int) -> str:
    """`count` tokens of the bundled tokenizer: `apple`, then ` apple` repeated."""
    return " ".join(["apple"] * count)


def fruit_rubric(*options: str) -> Rubric:
    return Rubric.model_validate({
        "name": "fruit",
        "instructions": "Read one note about a basket.",
        "fields": {
            "fruit": {"kind": "choice", "question": "Which fruit the basket holds", "options": list(options)},
            "ripe": {"kind": "boolean", "question": "Whether the fruit is ripe"},
        },
    })


def test_the_option_words_are_counted_as_meant(tokenizer):
    view = TokenizerView(tokenizer)
    assert [len(view.encode(words(n))) for n in (1, 500, 5000)] == [1, 500, 5000]


@pytest.mark.parametrize("mode", [ReadMode.BRANCH, ReadMode.EXACT])
def test_an_option_at_the_limit_compiles_into_a_row_as_deep_as_it_is_long(tokenizer, mode):
    # Two options that part ways only at their last token: the row follows the whole shared prefix.
    long = words(MAX_OPTION_TOKENS - 1)
    red, green = long + " red", long + " green"
    assert len(TokenizerView(tokenizer).encode(red)) == MAX_OPTION_TOKENS
    compiled = compile_rubric(tokenizer, fruit_rubric("pear", red, green), mode=mode)
    fruit = compiled.fields["fruit"]
    assert fruit.row_depth > MAX_OPTION_TOKENS
    assert all(0 <= parent < index for index, parent in enumerate(fruit.row_parents) if index > 0)
    assert max(len(line) for line in fruit.answer_lines) > MAX_OPTION_TOKENS
    assert {answer for answer, _ in fruit.paths} == {0, 1, 2}
    # The nodes' own repr stays shallow (the dataclass default descends one call per token).
    assert repr(fruit.root).startswith("TrieNode(children=") and isinstance(fruit.root, TrieNode)
    if mode is ReadMode.BRANCH:
        # Reads at the root and where `red` and `green` part ways, after the whole shared prefix.
        assert len(fruit.read_positions) == 2
        assert fruit.read_positions[1] == fruit.row_length - 1


def test_a_deep_trie_pickles_and_copies_node_for_node(tokenizer):
    long = words(MAX_OPTION_TOKENS - 1)
    fruit = compile_rubric(tokenizer, fruit_rubric("pear", "pearl", long + " red", long + " green")).fields["fruit"]
    for copied in (pickle.loads(pickle.dumps(fruit)), copy.deepcopy(fruit)):
        assert copied.root is not fruit.root
        # Every node's token, answers, reads and position, children in their order.
        assert _flat_trie(copied.root) == _flat_trie(fruit.root)
        assert len(_flat_trie(copied.root)) > MAX_OPTION_TOKENS
        assert (copied.row_tokens, copied.read_positions, copied.paths) == (fruit.row_tokens, fruit.read_positions, fruit.paths)


@pytest.mark.parametrize("length", [MAX_OPTION_TOKENS + 1, 5000])
def test_an_option_over_the_limit_is_refused_in_one_line_naming_it(tokenizer, length):
    with pytest.raises(CompileError) as raised:
        compile_rubric(tokenizer, fruit_rubric("pear", words(length)))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("fields.fruit: the option 'apple apple apple")
    assert f"is {length:,} tokens long; an option may be at most {MAX_OPTION_TOKENS:,} tokens" in message
    assert len(message) < 400


def test_the_limit_holds_in_the_ids_format_and_under_options_by(tokenizer):
    ids = Rubric.model_validate({**fruit_rubric("pear", words(5000)).model_dump(), "answer_format": "ids"})
    with pytest.raises(CompileError, match="fields.fruit: the option 'apple apple"):
        compile_rubric(tokenizer, ids)
    by = Rubric.model_validate({"name": "by", "fields": {
        "colour": {"kind": "choice", "question": "Colour", "options": ["green", "red"]},
        "fruit": {"kind": "choice", "question": "Fruit",
                  "options_by": {"colour": {"green": ["pear", "lime"], "red": ["cherry", words(5000)]}}},
    }})
    with pytest.raises(CompileError, match="5,000 tokens long"):
        compile_rubric(tokenizer, by)


def test_options_of_1_and_500_tokens_are_decided_as_a_plain_forward_reads_them(engine, transformers_engine):
    """The first field (pinned: its 500-token answer line is written into the next round's prompt) offers
    a one-token option and two 500-token options that part ways at their last token; each answer's raw
    probability equals the model's own plain forward over every branch's whole sequence."""
    long = words(499)
    rubric = fruit_rubric("pear", long + " red", long + " green")
    options = EngineOptions(debias=Debias.NONE)
    packed = Engine(engine.loaded, options=options, backend=engine.backend)
    plain = Engine(transformers_engine.loaded, options=options, backend=PlainForwardBackend(transformers_engine.loaded.model))
    mine, reference = packed.decide(rubric, TEXT), plain.decide(rubric, TEXT)
    assert mine.fields["fruit"].value in rubric.fields["fruit"].labels
    assert mine.fields["ripe"].value in (True, False) and mine.fields["ripe"].asked
    for name in ("fruit", "ripe"):
        ours, theirs = mine.fields[name].raw_probabilities, reference.fields[name].raw_probabilities
        assert ours is not None and theirs is not None and set(ours) == set(theirs)
        assert math.isclose(sum(ours.values()), 1.0, abs_tol=1e-9)
        for label, p in ours.items():
            assert abs(math.log(p) - math.log(theirs[label])) < 1e-3, (name, label[:20], p, theirs[label])
    # The one-token option is as readable as the long ones: the note names a pear.
    assert mine.fields["fruit"].value == "pear"
