"""TEST HARNESS ONLY: compile each Jinja2 template and expression once per `make test`, not once per task.

Why: Ansible templates every task's arguments and conditions in the worker it forks for that task, and
compiles each template string there (Jinja2's parse, code generation and Python's compile()); the
worker exits, and the next task of the same role, the same role on the next host, or the next
ansible-playbook run compiles the same strings again. In a validation run of role sglang_model
(cProfile in every worker) compiling was about a quarter of the workers' profiled time: 743 compiles, 3.3 of
13.5 s.

This hook keeps the Python code object Jinja2 compiles for a string (marshal, one file per key) in the
directory run_tests.py makes for its run (SGLANG_TEST_ANSIBALLZ_CACHE, shared with
ansiballz_cache.py, removed at the end), and builds the template from it, as Jinja2's own
``from_string`` does with a fresh compile. The key holds everything the compile reads: the source
string, the template's name and file name, the environment's class, lexer settings, extensions,
finalize and autoescape, the backslash-escaping state Ansible's lexer reads, whether Ansible allows
embedded templates (its code generator reads it), and the versions of
Ansible, Jinja2 and Python. The code Jinja2 generates also depends on the filters and tests the
template names (whether the environment has each, and whether it asks for the context): the entry
records them, and is used only where the environment looking them up now gives the same answers (the
template looks them up when it runs anyway). Only a compile that succeeded is kept (a syntax error is compiled, and
raised, as Ansible does); a template node built by other code, Ansible's template debugging, and any
error in the hook fall back to Jinja2's own code. SGLANG_TEST_NO_TEMPLATE_CACHE=1 turns it off, to
compare. Active only under run_tests.py, like ansiballz_cache.py: `make demo`, a lone pytest or
molecule run compile as Ansible does.
"""

from __future__ import annotations

import contextvars
import os
import sys

DIRECTORY = os.environ.get("SGLANG_TEST_ANSIBALLZ_CACHE", "")
MODULE = "ansible._internal._templating._jinja_bits"

# The expression a compile_expression call is compiling (its node tree is built from this string alone).
_EXPRESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("sglang_test_expression", default=None)

_LEXER_FIELDS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
                 "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
                 "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline")


def _key(bits, env, kind: str, source: str, name, filename) -> str:
    import hashlib

    import jinja2
    from ansible import __version__

    ctx = bits._TemplateCompileContext.current(optional=True)
    finalize = getattr(env, "finalize", None)
    parts = [__version__, jinja2.__version__, sys.version, kind, repr(name), repr(filename),
             f"{type(env).__module__}.{type(env).__qualname__}",
             f"{env.code_generator_class.__module__}.{env.code_generator_class.__qualname__}",
             repr([getattr(env, field) for field in _LEXER_FIELDS]), repr(sorted(env.extensions)),
             repr(bool(getattr(env, "optimized", True))), repr(bool(getattr(env, "is_async", False))),
             repr(env.autoescape if isinstance(env.autoescape, bool) else id(env.autoescape)),
             "" if finalize is None else f"{getattr(finalize, '__module__', '')}.{getattr(finalize, '__qualname__', '')}",
             repr(None if ctx is None else ctx.escape_backslashes),
             # Ansible's code generator inlines constant strings differently with embedded templates allowed.
             repr(getattr(bits._TemplateConfig, "allow_embedded_templates", None))]
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape"))
    digest.update(b"\0" + str(source).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _load(path: str):
    """The entry's (code, plugins) or None."""
    import marshal

    try:
        with open(path, "rb") as fh:
            return marshal.load(fh)
    except FileNotFoundError:
        return None


def _store(path: str, entry) -> None:
    import marshal

    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        marshal.dump(entry, fh)
    os.replace(tmp, path)


def _plugins(env, tree) -> tuple:
    """The filters and tests a template's nodes name, each with what Jinja2's code generator reads of it:
    whether the environment has it, and which argument it asks to be passed (context, environment...)."""
    from jinja2 import nodes
    from jinja2.utils import _PassArg

    found = []
    for kind, node_type in (("filters", nodes.Filter), ("tests", nodes.Test)):
        mapping = getattr(env, kind)
        for name in sorted({node.name for node in tree.find_all(node_type)}):
            func = mapping.get(name)
            found.append((kind, name, func is not None, repr(_PassArg.from_obj(func))))
    return tuple(found)


def _same_plugins(env, plugins) -> bool:
    from jinja2.utils import _PassArg

    try:
        for kind, name, present, pass_arg in plugins:
            func = getattr(env, kind).get(name)
            if (func is not None) != present or repr(_PassArg.from_obj(func)) != pass_arg:
                return False
    except Exception:  # a plugin that fails to load: Jinja2's own compile says so
        return False
    return True


def _usable(env, entry):
    """The entry's code, where the filters and tests it names are what they were at its compile."""
    import types

    if (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], types.CodeType)
            and _same_plugins(env, entry[1])):
        return entry[0]
    return None


def _patch(bits) -> None:
    import jinja2
    from jinja2 import nodes

    env_class = bits.AnsibleEnvironment
    real_compile = env_class.compile
    real_compile_expression = env_class.compile_expression

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        expression = _EXPRESSION.get()
        if isinstance(source, str):
            kind, text = "template", source
        elif expression is not None and isinstance(source, nodes.Template):
            kind, text = "expression", expression
        else:
            kind = text = None
        if raw or kind is None or self._debuggable_template_source:
            return real_compile(self, source, name, filename, raw, defer_init)
        try:
            path = os.path.join(DIRECTORY, f"jinja-{_key(bits, self, f'{kind}:{defer_init}', text, name, filename)}")
            code = _usable(self, _load(path))
        except Exception:  # Jinja2's own compile
            return real_compile(self, source, name, filename, raw, defer_init)
        if code is not None:
            return code
        code = real_compile(self, source, name, filename, raw, defer_init)  # its errors are Jinja2's, raised as they are
        try:
            tree = source if kind == "expression" else self.parse(source, name, filename)
            _store(path, (code, _plugins(self, tree)))
        except Exception:  # no entry: the next worker compiles again
            pass
        return code

    def compile_expression(self, source, *args, **kwargs):
        if not isinstance(source, str) or self._debuggable_template_source:
            return real_compile_expression(self, source, *args, **kwargs)
        try:  # a hit skips the parse too: Jinja2 builds the expression's template from the string alone
            path = os.path.join(DIRECTORY, f"jinja-{_key(bits, self, 'expression:False', source, None, None)}")
            code = _usable(self, _load(path))
        except Exception:
            code = None
        if code is not None:
            undefined_to_none = args[0] if args else kwargs.get("undefined_to_none", True)
            template = self.template_class.from_code(self, code, self.make_globals(None), None)
            return jinja2.environment.TemplateExpression(template, undefined_to_none)
        token = _EXPRESSION.set(source)
        try:
            return real_compile_expression(self, source, *args, **kwargs)
        finally:
            _EXPRESSION.reset(token)

    env_class.compile = compile
    env_class.compile_expression = compile_expression


if DIRECTORY and os.path.isdir(DIRECTORY) and not os.environ.get("SGLANG_TEST_NO_TEMPLATE_CACHE"):
    from import_hooks import patch_on_import

    patch_on_import({MODULE: _patch})
