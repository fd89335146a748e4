"""The interface checker's three-valued guard evaluator, on its own (files/sglang_interface_check/evaluator.py).

A guard is true, false or unknown (None) for one speculative algorithm. The trees here are a few
lines written by the test: a ``spec_info.py`` whose predicates the checker reads, a server_args.py
with an alias, and a runtime module with flags; the real releases are in test_interface_check.py.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
from pathlib import Path

import pytest

from repo import load

evaluator = load("roles/sglang_eagle3_patch/files/sglang_interface_check/evaluator.py")
algorithms = load("roles/sglang_eagle3_patch/files/sglang_interface_check/algorithms.py")
tree_mod = load("roles/sglang_eagle3_patch/files/sglang_interface_check/tree.py")
walker = load("roles/sglang_eagle3_patch/files/sglang_interface_check/walker.py")
tri_and, tri_or, Guard = evaluator.tri_and, evaluator.tri_or, walker.Guard

SPEC_INFO = """
from enum import IntEnum, auto


class SpeculativeAlgorithm(IntEnum):
    NONE = auto()
    EAGLE = auto()
    EAGLE3 = auto()
    STANDALONE = auto()
    NGRAM = auto()

    def is_none(self):
        return self == SpeculativeAlgorithm.NONE

    def is_eagle(self):
        \"\"\"EAGLE and EAGLE3 share the worker.\"\"\"
        return self == SpeculativeAlgorithm.EAGLE or self == SpeculativeAlgorithm.EAGLE3

    def is_eagle3(self):
        return self is SpeculativeAlgorithm.EAGLE3

    def is_ngram(self):
        return self == SpeculativeAlgorithm.NGRAM

    def is_speculative(self):
        return not self.is_none()

    def uses_draft_model(self):
        return self in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.EAGLE3, SpeculativeAlgorithm.STANDALONE)

    def needs_argument(self, other):
        return self == other

    def not_understood(self):
        return some_registry.lookup(self)
"""
SERVER_ARGS = """
class ServerArgs:
    def _handle_speculative_decoding(self):
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
"""
RUNNER = """
class ModelRunner:
    def __init__(self, server_args, spec_algorithm):
        self.eagle_aux = False
        if spec_algorithm.is_eagle3():
            self.eagle_aux = True
        self.never_on = False
        self.derived = False
        if self.eagle_aux:
            self.derived = True
        build(eagle_aux=self.eagle_aux)
"""
NOT_SPEC = {"NONE", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM"}


@pytest.fixture(scope="module")
def sglang(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree") / "sglang"
    for rel, text in {"srt/speculative/spec_info.py": SPEC_INFO, "srt/server_args.py": SERVER_ARGS,
                      "srt/model_executor/model_runner.py": RUNNER}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def make(sglang):
    """``make("EAGLE3")`` -> an Evaluator for that algorithm over the test tree."""
    tree = tree_mod.Tree(sglang)
    algos = algorithms.Algorithms(tree)
    return lambda algorithm: evaluator.Evaluator(tree, algos, algos.canonical(algorithm), tree.runtime_files())


def expr(source: str) -> ast.expr:
    return ast.parse(source, mode="eval").body


# --------------------------------------------------------------------------- Kleene's three-valued logic

VALUES = (True, False, None)


def kleene_and(a, b):
    return False if False in (a, b) else (True if a is b is True else None)


def kleene_or(a, b):
    return True if True in (a, b) else (False if a is b is False else None)


@pytest.mark.parametrize(("a", "b"), list(itertools.product(VALUES, VALUES)))
def test_and_or_follow_kleene_for_every_pair(a, b):
    assert tri_and([a, b]) is kleene_and(a, b)
    assert tri_or([a, b]) is kleene_or(a, b)


def test_and_or_of_many_and_of_none():
    assert tri_and([True, True, None, True]) is None and tri_and([None, None, False]) is False
    assert tri_or([False, None, False]) is None and tri_or([None, True, None]) is True
    assert tri_and([]) is True and tri_or([]) is False  # the empty conjunction holds: no guard at all
    assert tri_and(iter([True, True])) is True  # any iterable, read once


# --------------------------------------------------------------------------- what spec_info.py defines


def test_predicates_are_read_from_their_definitions(make):
    algos = make("EAGLE3").algorithms
    assert algos.members == ["NONE", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM"]
    assert algos.predicates["is_eagle"] == {"EAGLE", "EAGLE3"}  # ==, or, a docstring before the return
    assert algos.predicates["is_eagle3"] == {"EAGLE3"}  # is
    assert algos.predicates["is_speculative"] == NOT_SPEC - {"NONE"}  # not + another predicate
    assert algos.predicates["uses_draft_model"] == {"EAGLE", "EAGLE3", "STANDALONE"}  # in (...)
    # A method with an argument or a body not understood is no predicate: calls to it are unknown.
    assert "needs_argument" not in algos.predicates and "not_understood" not in algos.predicates


def test_aliases_and_canonical_names(make):
    algos = make("EAGLE3").algorithms
    assert algos.aliases == {"NEXTN": "EAGLE"}  # read from server_args.py
    assert algos.canonical("eagle3") == "EAGLE3" and algos.canonical("nextn") == "EAGLE"
    with pytest.raises(tree_mod.CheckError, match="unknown speculative algorithm 'WARP'.*EAGLE3.*NEXTN"):
        algos.canonical("WARP")


# --------------------------------------------------------------------------- expressions

CASES = [
    # (expression, value for EAGLE3, value for NGRAM, mentions speculation)
    ("self.spec_algorithm.is_eagle3()", True, False, True),
    ("self.server_args.speculative_algorithm.is_eagle()", True, False, True),
    ("spec_algorithm.is_speculative()", True, True, True),
    ("not self.spec_algorithm.is_eagle3()", False, True, True),
    ("not not self.spec_algorithm.is_ngram()", False, True, True),
    # and/or with an unknown operand: false (and) or true (or) decides, else unknown
    ("self.spec_algorithm.is_eagle3() and self.enable_x()", None, False, True),
    ("self.spec_algorithm.is_eagle3() or self.enable_x()", True, None, True),
    ("not (self.spec_algorithm.is_ngram() or self.enable_x())", None, False, True),
    ("self.spec_algorithm.is_eagle() and not self.spec_algorithm.is_eagle3()", False, False, True),
    # comparisons with the algorithm's name, a member, or a collection of them; aliases applied
    ("server_args.speculative_algorithm == 'EAGLE3'", True, False, True),
    ("server_args.speculative_algorithm == 'eagle3'", True, False, True),
    ("server_args.speculative_algorithm != 'EAGLE3'", False, True, True),
    ("self.speculative_algorithm in ('EAGLE', 'EAGLE3')", True, False, True),
    ("self.speculative_algorithm not in ['EAGLE', 'EAGLE3']", False, True, True),
    ("self.spec_algorithm is SpeculativeAlgorithm.EAGLE3", True, False, True),
    ("self.spec_algorithm is not SpeculativeAlgorithm.NGRAM", True, False, True),
    ("self.speculative_algorithm in {'NEXTN', 'NGRAM'}", False, True, True),
    # comparisons against values the checker cannot know are unknown, and say nothing about speculation
    ("server_args.speculative_algorithm == requested", None, None, False),
    ("server_args.speculative_algorithm in ('EAGLE3', requested)", None, None, False),
    ("server_args.speculative_algorithm == 3", None, None, False),
    ("server_args.speculative_algorithm < 'EAGLE3'", None, None, False),
    ("'EAGLE' <= self.speculative_algorithm == 'EAGLE3'", None, None, False),
    ("self.mode == 'EAGLE3'", None, None, False),  # the left side does not name the algorithm
    # predicate-like calls that are not predicates of the algorithm
    ("self.spec_algorithm.needs_argument(x)", None, None, False),
    ("self.spec_algorithm.is_dflash()", None, None, False),  # not defined in this release
    ("self.worker.is_eagle3()", None, None, False),  # the receiver is not the algorithm
    # constants; the draft worker's flags (the check is about the target); models and self
    ("True", True, True, False),
    ("0", False, False, False),
    ("None", False, False, False),
    ("self.is_draft_worker", False, False, False),
    ("not is_draft", True, True, False),
    ("self.model_runner.model", None, None, False),
    ("self", None, None, False),
    ("some_call()", None, None, False),
]


@pytest.mark.parametrize(("source", "eagle3", "ngram", "spec"), CASES, ids=[c[0] for c in CASES])
def test_expression_values(make, source, eagle3, ngram, spec):
    assert make("EAGLE3").expr(expr(source)) == (eagle3, spec)
    assert make("NGRAM").expr(expr(source)) == (ngram, spec)


def test_alias_in_a_comparison_and_a_requested_alias(make):
    test = expr("server_args.speculative_algorithm == 'NEXTN'")
    assert make("EAGLE").expr(test) == (True, True) and make("NEXTN").expr(test) == (True, True)
    assert make("EAGLE3").expr(test) == (False, True)


def test_self_is_the_algorithm_only_inside_speculative_algorithm(make):
    test = expr("self.is_eagle3()")
    assert make("EAGLE3").expr(test, self_is_algorithm=True) == (True, True)
    assert make("NGRAM").expr(test, self_is_algorithm=True) == (False, True)
    assert make("EAGLE3").expr(test) == (None, False)


# --------------------------------------------------------------------------- flags


def test_a_flag_set_only_under_an_algorithm_guard(make):
    """``self.eagle_aux = True`` only under ``is_eagle3()``: unknown (maybe set) for EAGLE3, false otherwise."""
    assert make("EAGLE3").expr(expr("self.eagle_aux")) == (None, True)
    assert make("NGRAM").expr(expr("self.eagle_aux")) == (False, True)
    assert make("NGRAM").expr(expr("not self.eagle_aux")) == (True, True)
    # build(eagle_aux=self.eagle_aux) only forwards the flag: it is no truthy assignment of its own.


def test_flags_never_set_true_unknown_names_and_depth(make):
    ngram = make("NGRAM")
    assert ngram.expr(expr("self.never_on")) == (False, False)  # every assignment is falsy
    assert ngram.expr(expr("self.nowhere_assigned")) == (None, False)
    # self.derived is set under `if self.eagle_aux`, a flag of a flag: followed one level only
    # (MAX_FLAG_DEPTH), so it stays unknown even where eagle_aux itself is false.
    assert evaluator.MAX_FLAG_DEPTH == 1
    assert ngram.expr(expr("self.derived")) == (None, False)


# --------------------------------------------------------------------------- guards: polarity, conjunction


def test_evaluate_is_the_conjunction_of_guards_with_their_polarity(make):
    eagle3, ngram = make("EAGLE3"), make("NGRAM")
    is_eagle3 = expr("self.spec_algorithm.is_eagle3()")
    unknown = expr("self.enable_x()")
    assert eagle3.evaluate([]) == (True, False)
    assert eagle3.evaluate([Guard(is_eagle3, True, False)]) == (True, True)
    assert eagle3.evaluate([Guard(is_eagle3, False, False)]) == (False, True)  # the else branch
    assert eagle3.evaluate([Guard(unknown, False, False)]) == (None, False)  # not unknown: unknown
    assert eagle3.evaluate([Guard(is_eagle3, True, False), Guard(unknown, True, False)]) == (None, True)
    assert ngram.evaluate([Guard(is_eagle3, True, False), Guard(unknown, True, False)]) == (False, True)


def test_without_flags_names_are_not_looked_up(make):
    guard = [Guard(expr("self.eagle_aux"), True, False)]
    assert make("NGRAM").evaluate(guard) == (False, True)
    assert make("NGRAM").evaluate(guard, flags=False) == (None, False)
    assert make("NGRAM").evaluate([Guard(expr("self.spec_algorithm.is_eagle3()"), True, False)], flags=False) == (
        False, True)


# --------------------------------------------------------------------------- guards the walker collects


def guards_of_calls(source: str) -> dict[str, tuple]:
    """method -> guards of each ``<model>.method(...)`` call in ``source``, as the walker finds them."""
    found: dict[str, tuple] = {}

    def on_call(node, role, guards, _walker):
        found[node.func.attr] = guards

    walker.Walker(call=on_call).block(ast.parse(textwrap.dedent(source)).body, ())
    return found


WALKED = """
def initialize(self):
    if not self.spec_algorithm.is_eagle3():
        return
    self.model.after_early_return()


def other(self, x):
    if self.spec_algorithm.is_ngram():
        self.model.in_ngram_branch()
    elif self.is_draft_worker:
        self.model.in_draft_branch()
    else:
        self.model.in_else_branch()
    ok = self.spec_algorithm.is_eagle() and self.model.after_and()
    y = self.model.in_ifexp() if self.spec_algorithm.is_eagle3() else None
    z = self.spec_algorithm.is_eagle3() or self.model.after_or()
"""
WALKED_EXPECT = {
    # method: (EAGLE3, NGRAM)
    "after_early_return": (True, False),
    "in_ngram_branch": (False, True),
    "in_draft_branch": (False, False),  # the draft worker's branch is never the target's
    "in_else_branch": (True, False),
    "after_and": (True, False),
    "in_ifexp": (True, False),
    "after_or": (False, True),  # reached only when the left side is false
}


@pytest.mark.parametrize("method", list(WALKED_EXPECT))
def test_walked_guards_evaluate_per_algorithm(make, method):
    guards = guards_of_calls(WALKED)[method]
    assert (make("EAGLE3").evaluate(guards)[0], make("NGRAM").evaluate(guards)[0]) == WALKED_EXPECT[method]
