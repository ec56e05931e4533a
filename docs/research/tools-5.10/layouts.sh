#!/bin/sh
# usage: layouts.sh KO OUT struct_name...   (ptype /o of each trace_event_raw struct, via gdb, compact)
ko=$1; out=$2; shift 2
args=""
for s in "$@"; do args="$args -ex 'ptype /o struct $s'"; done
eval nice gdb -batch $args "$ko" > "$out.full" 2>&1
python3 - "$out.full" > "$out" <<'PY'
import re,sys
cur=None; depth=0; fields=[]
for line in open(sys.argv[1]):
    m=re.search(r'type = struct (\w+) \{',line)
    if m: cur=m.group(1); depth=0; fields=[]; continue
    if cur is None: continue
    if '{' in line: depth+=1
    mm=re.match(r'/\*\s+(\d+)\s+\|\s+(\d+) \*/\s+(.*?);?\s*$',line)
    if mm and depth==0:
        decl=mm.group(3).rstrip(';')
        fields.append(f'{decl.split()[-1]}@{mm.group(1)}/{mm.group(2)}')
    if '}' in line:
        if depth==0:
            print(cur+': '+'  '.join(f for f in fields if not f.startswith('ent@') and not f.startswith('__data['))); cur=None
        else: depth-=1
PY
