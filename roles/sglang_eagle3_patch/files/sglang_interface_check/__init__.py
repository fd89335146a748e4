"""Tell, in seconds and before any server starts, whether a model is ready for a speculative algorithm.

Why this exists: SGLang's ``KimiK25ForConditionalGeneration`` wraps ``DeepseekV3ForCausalLM`` and (in
0.5.9) did not forward the EAGLE-3 interface, so the server died about eight minutes into every start,
one missing method per crash. This tool reads the SGLang package itself (``ast`` only, nothing is
imported, no torch needed) and answers the same question in well under five seconds.

It does NOT carry a list of required methods. It derives the list from SGLang's own call sites, so a
method that a new SGLang release starts to call is found without editing this file. The rules, each
chosen after reading 0.5.9 ... 0.5.23:

1. Where call sites are looked for: every module under ``srt/`` except ``srt/models/`` (models provide
   the interface, runners and workers use it). A text search finds the lines with
   ``model.<name>(`` first; only the top-level definitions around them are parsed (parsing is most
   of the cost: 0.5.23 has 2,000 modules).

2. Which receivers are a model: an expression whose last name is ``model`` or ends in ``_model``
   (``self.model``, ``self.model_runner.model``, ``self.target_worker.model_runner.model``,
   ``target_model``, ``self.draft_runner.model``, ``model``). ``<model>.model.X`` is an inner module of a
   model, not the model, and is skipped. Only calls ``<model>.X(...)`` count: the issue is about methods.
   A method name counts only if some class in ``srt/models/`` defines it: SGLang also calls str and
   ``torch.nn.Module`` methods on values it names ``*model`` (a model path's ``endswith``,
   ``named_modules``), which are not part of the model interface.

3. Target or draft: a name on the receiver path containing ``draft`` means the draft model
   (``draft_model_runner``, ``draft_runner_list[i]``); one containing ``target`` means the target
   (``target_worker``, ``target_model``). A receiver with neither is the runner's own model:
   inside ``srt/speculative/`` that runner is the DRAFT one (an EAGLE worker is a TpModelWorker built
   with ``is_draft_worker=True``, the draft CUDA-graph runners get the draft runner, and SGLang always
   reaches the target there through ``target_worker``/``target_model``); outside it (ModelRunner,
   CudaGraphRunner, ...) the code runs for the target as well, unless its enclosing class is named
   ``*Draft*`` or its guard says ``is_draft_worker``. So ``get_embed_and_head`` (called on
   ``target_worker.model_runner.model``) is required of the target while ``set_embed_and_head``,
   ``set_embed``, ``hot_token_id`` and ``load_lm_head_from_target`` (called on the draft runner's model)
   are not. The patch role still adds ``set_embed_and_head`` by default, as the issue asks: the Kimi
   wrapper can serve as a draft or share heads, and the method is harmless on a target.

4. Which algorithm a call site belongs to:
   * inside ``srt/speculative/``: the top-level function or class holding the call must be reached
     from a worker class that ``SpeculativeAlgorithm.create_worker`` returns for the algorithm (its
     ``if self.is_eagle() ...`` branches are evaluated per algorithm): a reached definition reaches
     every definition of ``srt/speculative/`` it names (bases, imports, calls), except under a guard
     that is false for the algorithm. The registry class itself is not followed (it names every
     worker), which keeps EAGLE3 from reaching the DFLASH or DSPARK workers through it;
   * elsewhere: the call's guard must mention the speculative algorithm, directly
     (``spec_algorithm.is_eagle3()``, ``speculative_algorithm == "EAGLE3"``) or through a flag
     (``if self.eagle_use_aux_hidden_state:``) whose truthy assignments are guarded so; flags are
     found by name (attributes and parameters anywhere, ``f(flag=self.cfg.flag)`` only forwards;
     module globals in their own module), one level deep. Unguarded
     calls (``forward``, ``load_weights``) are the generic model interface, not this check's subject.
   In both cases the guard must not be false for the algorithm. Predicates are evaluated from their
   definitions in ``spec_info.py`` (``is_eagle()`` is true for EAGLE and EAGLE3, ``is_eagle3()`` for
   EAGLE3 only, ...), aliases such as NEXTN -> EAGLE are read from SGLang too. A guard is the chain
   of enclosing ``if``/``elif``/``else`` tests, ``and``/``or`` short-circuits, conditional
   expressions and earlier ``if ...: return/raise`` exits in the same function; anything not
   understood is "unknown" (three-valued logic), which keeps the call site.

5. Optional calls: a call guarded by ``hasattr(<receiver>, "X")`` (or ``isinstance`` with a
   runtime-checkable Protocol declaring ``X``) whose other branch does not raise is optional
   (SGLang copes without it). If the other branch raises (``if not hasattr(...): raise``) the
   method is required.

6. What the model provides: the class(es) named by ``EntryClass`` in ``srt/models/<model>.py``, their
   methods and class attributes, those of their bases inside SGLang (resolved through imports), and
   those of an inner model when the class forwards ``__getattr__``. A method that forwards to
   ``self.<inner>.X`` while the inner class does not define ``X`` counts as missing.

Run it on a host (standard library only) from the directory holding this package:
``python3 -m sglang_interface_check SGLANG_DIR [--model kimi_k25] [--algorithm EAGLE3] [--json]``.
Where the parts are:
  tree.py        the sglang package read: file texts, partial parsing, module paths, version
  walker.py      the call-site walker: statements and expressions with the guards around them
  evaluator.py   the three-valued guard evaluator: algorithm predicates, comparisons and flags
  algorithms.py  SpeculativeAlgorithm read from spec_info.py: members, predicates, aliases, workers
  rules.py       rules 1-5: call sites on a model, their role, worker reach, optional calls
  model.py       rule 6: what the EntryClass model provides (bases, __getattr__, delegation)
  analysis.py    check(): the rules together, the report as a dict
  cli.py         the command line, the text report, the exit status

Exit status: 0 the model provides every required method, 1 something is missing (listed with the
call sites that need it), 2 the input could not be analysed (no ``EntryClass``, class not found,
syntax error, not an sglang directory).
"""
