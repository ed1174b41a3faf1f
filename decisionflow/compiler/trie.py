"""Each field as a token trie of its allowed JSON lines, and the trie as a row of one packed pass.

Every candidate answer is tokenised as a *complete JSON line in context* (`"key": true,` after the
prompt's tail), never as text split at the colon: the tokenizer decides where the value starts, and a
hand-made split leaves a dangling space token that measures almost none of the model's belief. The
candidates' token sequences share a stem (indentation, key, colon); the row ends where they part
ways, and the trie below says which further positions must be read to tell the labels apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import CompileError
from ..spec.rubric import AnswerFormat, FieldKind, FieldSpec, Value
from ..spec.text import shown
from .layout import Layout
from .prompt import value_literal
from .tokens import TokenizerView
from .tree import tree_depths

MAX_OPTION_TOKENS = 1024
"""The most tokens one option's label may have. A label is written whole into the prompt's catalog and,
once answered, into the answer line that later rounds read, and its trie is as deep as it is long: on the
bundled model one option of 1,024 tokens takes 2,121 of the 8,192 positions before any input (3,145 read
exactly; two that part ways only at their last token, 4,171), leaving room for the input. A longer label
is refused when the rubric is compiled, naming the field and the option; a long text belongs in the
option's description, which is written into the catalog only."""


class ReadMode(str, Enum):
    BRANCH = "branch"
    """Read logits only where the trie forks between different answers."""
    EXACT = "exact"
    """Score every token of every answer's line, its line ending included."""


@dataclass(eq=False, repr=False)
class TrieNode:
    children: dict[int, "TrieNode"] = field(default_factory=dict)
    values: set[int] = field(default_factory=set)
    """Indexes of the answers reachable below this node."""
    read: bool = False
    """Whether the next-token distribution after this node must be read."""
    reads_below: bool = False
    """Whether this node or any node under it is read (so its token must be fed)."""
    position: int = -1
    """Index of this node's token within the field's row (the root is the stem's last token)."""

    def __repr__(self) -> str:
        # Shallow: the default repr descends one call per token, past the recursion limit for a long option.
        return (f"TrieNode(children={list(self.children)}, values={sorted(self.values)}, read={self.read}, "
                f"reads_below={self.reads_below}, position={self.position})")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # pickle and deepcopy descend one call per level as well: the subtree travels as flat rows instead.
        return _rebuilt_trie, (_flat_trie(self),)


_FlatNode = tuple[int, int, tuple[int, ...], bool, bool, int]
"""(parent's index or -1, token from the parent, values, read, reads_below, position), parents first."""


def _flat_trie(root: TrieNode) -> list[_FlatNode]:
    rows: list[_FlatNode] = []
    stack: list[tuple[int, int, TrieNode]] = [(-1, -1, root)]
    while stack:
        parent, token, node = stack.pop()
        rows.append((parent, token, tuple(sorted(node.values)), node.read, node.reads_below, node.position))
        index = len(rows) - 1
        # Pushed reversed, popped in insertion order: children keep their order when rebuilt.
        stack.extend((index, child_token, child) for child_token, child in reversed(node.children.items()))
    return rows


def _rebuilt_trie(rows: list[_FlatNode]) -> TrieNode:
    nodes: list[TrieNode] = []
    for parent, token, values, read, reads_below, position in rows:
        node = TrieNode(values=set(values), read=read, reads_below=reads_below, position=position)
        if parent >= 0:
            nodes[parent].children[token] = node
        nodes.append(node)
    return nodes[0]


@dataclass(frozen=True)
class CompiledField:
    spec: FieldSpec
    values: tuple[Value, ...]
    labels: tuple[str, ...]
    """Each allowed answer as reported in results (`true`, `7`, `billing`)."""
    stem: tuple[int, ...]
    """Tokens every candidate line shares; the row's first part."""
    row_tokens: tuple[int, ...]
    """stem + the trie tokens that lead to read positions."""
    row_parents: tuple[int, ...]
    """Parent of each row token within the row; -1 means the end of the shared context."""
    root: TrieNode
    read_positions: tuple[int, ...]
    """Row positions whose next-token distribution is read."""
    answer_lines: tuple[tuple[int, ...], ...]
    """Per answer, the complete line written into the prompt once it is decided."""
    mass_tokens: tuple[int, ...]
    """Tokens that start an allowed answer at the root (every tokenisation, not only the canonical)."""
    method: str
    edges: tuple[tuple[int, int], ...] = ()
    """Every (read, token) whose probability the readout needs: `read` indexes `read_positions`."""
    paths: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """Per spelling of an answer, (answer index, the edges along it): its probability is their product."""

    @property
    def root_read(self) -> int:
        """Index in `read_positions` of the root, where the candidate mass is read."""
        return self.read_positions.index(self.root.position)

    @property
    def row_length(self) -> int:
        return len(self.row_tokens)

    @property
    def row_depth(self) -> int:
        """Positions the row occupies after its context: its longest path, not its token count."""
        return max(tree_depths(self.row_parents)) + 1


def spellings(spec: FieldSpec, value: Value, answer_format: AnswerFormat) -> list[str]:
    """Every way the model may spell one answer; the first is canonical. `true` and `"true"` are one answer,
    as are `5` and `"5"` for a score or a choice option written as a JSON literal."""
    canonical = value_literal(spec, value, answer_format)
    written_bare = spec.kind in (FieldKind.BOOLEAN, FieldKind.SCORE) or (
        answer_format is AnswerFormat.LABELS and spec.literal_of(value) is not None)
    if written_bare:
        return [canonical, json.dumps(canonical)]
    return [canonical]


def compile_field(
    view: TokenizerView,
    spec: FieldSpec,
    *,
    layout: Layout,
    anchor: str,
    anchor_ids: list[int],
    answer_format: AnswerFormat,
    mode: ReadMode,
) -> CompiledField:
    check_option_lengths(view, spec)
    values = spec.values
    candidates: list[tuple[int, tuple[int, ...]]] = []
    seen: dict[tuple[int, ...], int] = {}
    for index, value in enumerate(values):
        for spelling in spellings(spec, value, answer_format):
            tokens = view.suffix_after(anchor_ids, anchor, layout.line(spec.name, spelling))
            if tokens is None:
                raise CompileError(f"fields.{spec.name}: the line for answer {value!r} merges with the text before it")
            tokens_t = tuple(tokens)
            if tokens_t in seen and seen[tokens_t] != index:
                raise CompileError(
                    f"fields.{spec.name}: answers {values[seen[tokens_t]]!r} and {value!r} tokenise identically "
                    "and cannot be told apart"
                )
            if tokens_t not in seen:
                seen[tokens_t] = index
                candidates.append((index, tokens_t))

    stem_length = _common_prefix_length([t for _, t in candidates])
    shortest = min(len(t) for _, t in candidates)
    if stem_length >= shortest:
        stem_length = shortest - 1
    if stem_length < 1:
        raise CompileError(f"fields.{spec.name}: the candidate lines share no prefix (not even the key)")
    for (i, a), (j, b) in ((x, y) for x in candidates for y in candidates if x[0] != y[0]):
        if len(a) < len(b) and b[: len(a)] == a:
            raise CompileError(
                f"fields.{spec.name}: the line of {values[i]!r} is a prefix of the line of {values[j]!r}; "
                "they cannot be told apart"
            )
    stem = candidates[0][1][:stem_length]

    root = TrieNode()
    for index, tokens in candidates:
        node = root
        node.values.add(index)
        for token in tokens[stem_length:]:
            node = node.children.setdefault(token, TrieNode())
            node.values.add(index)

    _mark_reads(root, mode)
    row_tokens = list(stem)
    row_parents = list(range(-1, stem_length - 1))
    root.position = stem_length - 1
    read_positions: list[int] = []
    _pack(root, row_tokens, row_parents, read_positions)

    deepest_read = len(read_positions) > 1
    method = "exact" if mode is ReadMode.EXACT else ("branch" if deepest_read else "first_token")
    canonical = {index: tokens for index, tokens in reversed(candidates)}
    edges, paths = _readout_paths(root, read_positions)
    return CompiledField(
        edges=edges,
        paths=paths,
        spec=spec,
        values=values,
        labels=spec.labels,
        stem=stem,
        row_tokens=tuple(row_tokens),
        row_parents=tuple(row_parents),
        root=root,
        read_positions=tuple(read_positions),
        answer_lines=tuple(canonical[i] for i in range(len(values))),
        mass_tokens=_mass_tokens(view, root, [t[stem_length:] for _, t in candidates]),
        method=method,
    )


def check_option_lengths(view: TokenizerView, spec: FieldSpec) -> None:
    """Refuse an option whose label is longer than `MAX_OPTION_TOKENS` tokens (tokenised on its own)."""
    if spec.kind is not FieldKind.CHOICE:
        return
    for label in spec.labels:
        if not may_exceed_option_limit(label):
            continue
        count = len(view.encode(label))
        if count > MAX_OPTION_TOKENS:
            raise CompileError(
                f"fields.{spec.name}: the option {shown(label, 60)} is {count:,} tokens long; an option may be at "
                f"most {MAX_OPTION_TOKENS:,} tokens (each is written whole into the prompt and its answer line): "
                "shorten its label (a longer text can go in the option's description)"
            )


def may_exceed_option_limit(label: str) -> bool:
    """Whether `label` can be longer than `MAX_OPTION_TOKENS` tokens in any tokenizer: each token stands
    for at least one byte of its text (one more for the leading space some tokenizers add), so a label
    of fewer bytes needs no tokenising."""
    return len(label.encode("utf-8", errors="surrogatepass")) >= MAX_OPTION_TOKENS


def _readout_paths(
    root: TrieNode, read_positions: list[int]
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, tuple[int, ...]], ...]]:
    """The trie as the readout walks it: the edges leaving read nodes, and each spelling's path of edges.

    A node that is not read passes its weight on unchanged (every candidate below agrees on the next
    token, or a single answer is left), so a path multiplies only the probabilities read at forks.
    """
    index_of = {position: i for i, position in enumerate(read_positions)}
    edges: list[tuple[int, int]] = []
    paths: list[tuple[int, tuple[int, ...]]] = []
    stack: list[tuple[TrieNode, tuple[int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if not node.read:
            if len(node.values) == 1 and not node.reads_below:
                paths.append((next(iter(node.values)), path))
                continue
            stack.extend((child, path) for child in reversed(node.children.values()))
            continue
        for token, child in reversed(node.children.items()):
            edges.append((index_of[node.position], token))
            stack.append((child, path + (len(edges) - 1,)))
    return tuple(edges), tuple(paths)


def _common_prefix_length(sequences: list[tuple[int, ...]]) -> int:
    first = sequences[0]
    length = 0
    while length < len(first) and all(len(s) > length and s[length] == first[length] for s in sequences):
        length += 1
    return length


def _mark_reads(root: TrieNode, mode: ReadMode) -> None:
    """Exact mode reads after every token of every line; branch mode only where answers part ways.

    Walked with a list, not recursion: a trie is as deep as its longest answer, which may be
    `MAX_OPTION_TOKENS` long, past Python's recursion limit."""
    order: list[TrieNode] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    # In that (pre-)order a node comes before everything under it: reversed, children are settled first.
    for node in reversed(order):
        if mode is ReadMode.EXACT:
            node.read = bool(node.children)
        else:
            node.read = len(node.values) > 1 and len(node.children) > 1
        node.reads_below = node.read or any(child.reads_below for child in node.children.values())


def _pack(root: TrieNode, tokens: list[int], parents: list[int], reads: list[int]) -> None:
    """The trie's fed nodes appended to the row depth first, children in insertion order, each node's
    read recorded when it is placed (iterative, as `_mark_reads`)."""
    if root.read:
        reads.append(root.position)
    stack = [(token, child, root) for token, child in reversed(root.children.items()) if child.reads_below]
    while stack:
        token, node, parent = stack.pop()
        node.position = len(tokens)
        tokens.append(token)
        parents.append(parent.position)
        if node.read:
            reads.append(node.position)
        stack.extend((t, child, node) for t, child in reversed(node.children.items()) if child.reads_below)


def _mass_tokens(view: TokenizerView, root: TrieNode, suffixes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Root tokens that begin some allowed answer's text, however the tokenizer splits it."""
    found = set(root.children)
    texts_to_ids = view.texts_to_ids
    longest = view.longest_text  # prefixes beyond it name no token: a long option costs no more here
    for suffix in suffixes:
        text = view.decode(suffix)
        for end in range(1, min(len(text), longest) + 1):
            found.update(texts_to_ids.get(text[:end], ()))
    return tuple(sorted(found))
