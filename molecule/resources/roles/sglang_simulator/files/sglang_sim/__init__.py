"""SGLang server SIMULATOR -- a TEST DOUBLE, not SGLang. No GPU, no model, no real tokens.

Why it exists: the Ansible project that turns a GPU server into an SGLang service needs
something to start, health-check, benchmark and break on machines without a GPU (CI,
molecule containers, a laptop).  This program stands in for `python -m
sglang.launch_server` of SGLang 0.5.9: it takes exactly SGLang's command-line flags (from
flags.json in this package, generated from SGLang's own server_args.py; unknown flags are an
argparse error, exit 2) and speaks SGLang's HTTP API in the shapes of the release it reports
(shapes.py): playing 0.5.17 or later, 0.5.17's, held field by field, list item by list item and
event by event to what a real 0.5.17 server answered on an H200
(tests/roles/sglang_server/test_sim_contract.py); playing an older release, 0.5.9's with the
fields 0.5.17 added (no older release is recorded); but every answer is made up.  Everything it
says about itself is labelled: the --help text, the first log line and `"simulator": true` in
/get_server_info.
Standard library only (python3 >= 3.11).

Run it as SGLang is run, by module: ``python3 -m sglang_sim --model-path ... [SGLang flags]`` with
the directory holding this package on ``sys.path`` (on a host: the unit's launcher,
``sglang_launch.py --module sglang_sim``, with PYTHONPATH naming the directory the test role
sglang_simulator copies this package into, whole).  Where the parts are:
  settings.py    what the simulator is told (SGLANG_SIM_* environment, faults) and its label
  flags.py       SGLang's command line, rebuilt from flags.json (argparse, ServerArgs defaults)
  sglang_dir.py  what it reads from a real SGLang package (version, the Kimi-K2.5 EAGLE-3 methods)
  engine.py      the timing model: admission, prefill, the decode step clock, EAGLE acceptance
  specmodel.py   the speculative-decoding MODEL (SGLANG_SIM_ACCEPT_FIRST): what steps/topk/draft tokens are worth
  http.py        HTTP/1.1 on asyncio streams: requests, plain and chunked (SSE) responses
  api.py         SGLang's HTTP API: routes, auth, readiness, response shapes; serve()
  shapes.py      where 0.5.17's answers differ in shape from 0.5.9's (the release it reports picks)
  __main__.py    start-up: parse, validate, log as SGLang does, serve

Endpoints: GET /health, /health_generate (503 until ready, then 200 after ~1 s, as SGLang's
health check runs a 1-token generation and polls once a second), /get_server_info and
/server_info (server args, internal_states[0].avg_spec_accept_length when speculative,
updated at each "Decode batch" log line, every --decode-log-interval steps, as in SGLang;
version), /get_model_info and /model_info, /v1/models, /v1/loads and /get_load (running and
queued requests, for draining a host before a restart: /v1/loads counts as SGLang's scheduler does, a
request in its prefill in num_used_tokens only (the KV cache it holds), one still being tokenized
nowhere; playing 0.5.9 it counts at each request, playing 0.5.17 or later it answers the snapshot last
published after a prefill, every 15th decode step or when idle, as those releases do); POST /generate (native; JSON or SSE
with "stream": true), /v1/completions, /v1/chat/completions (JSON or SSE; usage in the
response, per chunk with stream_options.continuous_usage_stats, and as a final chunk with
stream_options.include_usage).  With --api-key every request needs `Authorization: Bearer
KEY` (401 {"error": "Unauthorized"}) except OPTIONS and paths starting with /health or
/metrics, the exemptions of sglang/srt/utils/auth.py.

Timing model (the "truth" the benchmark tests measure against):
  step(n)  = SLOWDOWN_FACTOR / DECODE_TOK_S * (1 + BATCH_SLOWDOWN * (n - 1))
             n = requests in the decode batch when the step starts.  One shared step clock
             advances every running request by one step per step(n); steps are scheduled
             on absolute deadlines, so lateness of one step is not carried into the next.
  prefill  = the first token arrives TTFT_MS * SLOWDOWN_FACTOR / 1000 s after the request
             was read (or admitted, if it had to queue); the request then joins the decode
             batch at the next step boundary.
  tokens   = 1 per step without speculation.  With --speculative-algorithm, k tokens per
             verify step, 1 <= k <= speculative_num_draft_tokens, drawn from a chain
             acceptance model (each draft token accepted with probability p, p solved so
             that E[k] = ACCEPT_LENGTH) and steered so that a request's running total stays
             within 1 token of steps * its accept length (seeded per request by SEED): ACCEPT_LENGTH,
             or with NOISE_PCT ACCEPT_LENGTH * (1 + N(0, NOISE_PCT %)) per request.
  noise    run-to-run noise (the defaults: settings.DEFAULT_NOISE_PCT and DEFAULT_START_NOISE_PCT,
             0.3% and 0.15%, the lent H200's; the test inventory sets 5% per request, 0.5% per
             start; 0 turns either off): NOISE_PCT spreads each speculative request's accept length (so its tok/s,
             by a little less: the prefill does not spread); START_NOISE_PCT draws one speed factor
             per start, 1 + N(0, START_NOISE_PCT %), that divides step and prefill times.  The
             draws are seeded by SEED and a nonce per start (NOISE_NONCE, else the start's clock in
             ns; logged in the settings line), so each start differs and any start can be replayed.
             Without speculation a request has only the per-start factor.
  => single-request decode rate = DECODE_TOK_S * ACCEPT_LENGTH / SLOWDOWN_FACTOR tokens/s,
     and a request of N tokens alone takes TTFT + (N - 1) / ACCEPT_LENGTH * step(1).
  Admission: at most max_running_requests run (prefill + decode); the rest queue.  As in
  SGLang 0.5.9, EAGLE/EAGLE3/STANDALONE/NGRAM default it to 48; otherwise unlimited here.
  Outputs always run to max_new_tokens (finish_reason "length"); there is no EOS.

Speculative-decoding MODEL (specmodel.py; a model, not a measurement of SGLang), on when
SGLANG_SIM_ACCEPT_FIRST is set; it replaces ACCEPT_LENGTH and the step time above.  With
s = speculative_num_steps, k = speculative_eagle_topk, N = speculative_num_draft_tokens (N = s + 1
when k = 1, SGLang's rule), a1 = ACCEPT_FIRST, d = ACCEPT_DECAY, c_d = DRAFT_STEP_COST,
c_v = VERIFY_TOKEN_COST, M = SPEC_MEMORY_LIMIT:
  depth    L = min(s, N - 1);  width  w = min(k, (N - 1) / L), at least 1
  q_i      = 1 - (1 - a1 * d^(i-1))^w        draft position i accepted given 1..i-1 were (i = 1..L):
                                             falls with depth, rises with the tree's width (topk)
  E[k]     = 1 + sum_{j=1..L} prod_{i<=j} q_i   tokens per verify step; draws follow the q_i
  step(n)  = SLOWDOWN_FACTOR / DECODE_TOK_S * ((1 + BATCH_SLOWDOWN (n - 1)) + c_d s + c_v (N - 1) n)
             a draft cost per step, a verify cost per draft token and request
  memory   k * N > M (M > 0): the start fails after LOAD_SECONDS with SGLang's
             "torch.OutOfMemoryError: CUDA out of memory" and exit 1
  => decode tok/s of n requests together = n E[k] / step(n): specmodel.expected_tok_s(), the truth
     a tuner's result is checked against.

Settings come from the environment only, because the command line must be SGLang's:
  SGLANG_SIM_LOAD_SECONDS      3      seconds from start to ready (health 503 meanwhile)
  SGLANG_SIM_DECODE_TOK_S      50     decode steps/s of one request (its tok/s without speculation)
  SGLANG_SIM_ACCEPT_LENGTH     2.5    mean tokens per verify step when speculative
  SGLANG_SIM_TTFT_MS           150    prefill time (time to first token) per request
  SGLANG_SIM_TOKENIZE_MS       0      time in the tokenizer manager before the scheduler sees a request
                                      (image preprocessing), counted by no endpoint, as in SGLang
  SGLANG_SIM_BATCH_SLOWDOWN    0.01   step-time growth per extra running request
  SGLANG_SIM_SLOWDOWN_FACTOR   1.0    multiplies every generation time (regression gates)
  SGLANG_SIM_SEED              0      seed of the per-request acceptance draws
  SGLANG_SIM_NOISE_PCT         0.3    spread of each request's accept length, % (noise, above;
                                      default: settings.DEFAULT_NOISE_PCT)
  SGLANG_SIM_START_NOISE_PCT   0.15   spread of the speed factor drawn per start, % (settings.DEFAULT_START_NOISE_PCT)
  SGLANG_SIM_NOISE_NONCE       clock  the start's nonce of the noise draws (to replay a start)
  SGLANG_SIM_ACCEPT_FIRST      unset  a1 in (0, 1): turns the speculative model on (below)
  SGLANG_SIM_ACCEPT_DECAY      0.85   d in (0, 1]: acceptance factor per deeper draft position
  SGLANG_SIM_DRAFT_STEP_COST   0.08   c_d: one draft step, in decode steps of one request
  SGLANG_SIM_VERIFY_TOKEN_COST 0.03   c_v: one verified draft token of one request, same unit
  SGLANG_SIM_SPEC_MEMORY_LIMIT 0      M: largest topk x draft tokens that starts; 0: no limit
  SGLANG_SIM_SGLANG_DIR        unset  an SGLang package dir (holding srt/) to inspect; auto: the one the
                                      running Python finds (not imported), as sglang_build's release entry does
Per release (TEST ONLY): <release>/sim-slowdown-factor, a number > 0 in the release that holds the
  package of SGLANG_SIM_SGLANG_DIR (the parent of its venv, links resolved: what current pointed at
  when the simulator started), multiplies SLOWDOWN_FACTOR: a test writes 1.25 there to make that
  release 20% slower in tok/s than the others on the same host (sglang_dir.release_of).
  <release>/sim-output-corruption (a share in [0, 1]) and <release>/sim-tool-format ("kimi" or
  "broken") make a release answer wrong (answers.py, toolcalls.py); SGLANG_SIM_OUTPUT_CORRUPTION
  and SGLANG_SIM_TOOL_FORMAT set the same for every release.
Greedy answers (answers.py): a chat request at temperature 0 without ignore_eos gets the reply of a
  deterministic model (the same prompt, the same reply), thinking then answering, integer
  arithmetic right; with tools, a Kimi-K2 tool call (toolcalls.py); both shaped by the parsers.
  It thinks for a length drawn per prompt from a log-normal (median 512 tokens; answers.py cites
  the public reports behind it) within max_tokens, unless chat_template_kwargs {"thinking": false}.
  Token ids (tokens.py): return_token_ids / return_prompt_token_ids on a chat request (SGLang
  0.5.17's fields) return the reply's and its prompt's ids; /generate with return_logprob answers
  SGLang's input/output logprobs, the teacher forcing of given tokens by the same greedy model.
  SGLANG_SIM_FAULT             unset  comma-separated faults, below
Faults:
  Kimi-K2.5 + EAGLE-3 check (default on): when SGLANG_SIM_SGLANG_DIR is set, the algorithm
    is EAGLE3 and --model-path names Kimi-K2.5, the simulator parses
    DIR/srt/models/kimi_k25.py with `ast` and, if KimiK25ForConditionalGeneration lacks a
    method SGLang 0.5.9 calls on the target model (set_eagle3_layers_to_capture from
    model_runner.py, then get_embed_and_head from eagle_worker.py), prints SGLang's
    traceback ending in `AttributeError: 'KimiK25ForConditionalGeneration' object has no
    attribute '...'` to stderr after LOAD_SECONDS and exits 1, as the real server does.
  crash_on_start_missing_eagle3  run that check whatever the model path says.
  crash_after_requests:N  N generation requests are served; the process dies (os._exit(1))
                          half-way through request N+1, cutting its stream.
  error_after_requests:N  generation requests after the first N get HTTP 500.
  never_ready             /health and /health_generate answer 503 forever.
Generation requests are those to /generate, /v1/completions and /v1/chat/completions.

Deliberate differences from SGLang: the port opens at once (SGLang listens only after the
weights are loaded); generation endpoints answer 503 until ready; logs go to stdout;
prompt_tokens is a whitespace word count; one prompt per request (no batches, n=1);
--config is refused (exit 2) and /metrics is absent; of SGLang's argument post-processing only
the speculative defaults (NEXTN->EAGLE, auto 3/1/4, draft tokens = steps + 1 for topk 1,
max_running_requests 48) and served_model_name/tokenizer_path defaults are applied.
"""
