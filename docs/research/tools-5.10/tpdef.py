#!/usr/bin/env python3
"""Print the definition (proto, struct entry, fast_assign) of tracepoints from kernel headers.
usage: tpdef.py HEADER EVENT..."""
import re, sys
src = open(sys.argv[1]).read()
def block(start):
    # from start (at macro name) to matching close paren
    i = src.index('(', start); depth = 0
    for j in range(i, len(src)):
        if src[j] == '(': depth += 1
        elif src[j] == ')':
            depth -= 1
            if depth == 0: return src[start:j+1]
    return src[start:]
def line_of(pos): return src.count('\n', 0, pos) + 1
for ev in sys.argv[2:]:
    m = re.search(r'\bTRACE_EVENT(?:_CONDITION|_FN)?\(\s*' + re.escape(ev) + r'\s*,', src)
    if m:
        print(f'### {ev}: TRACE_EVENT at line {line_of(m.start())}'); print(block(m.start())); print(); continue
    m = re.search(r'\bDEFINE_EVENT(?:_PRINT|_CONDITION)?\(\s*(\w+)\s*,\s*' + re.escape(ev) + r'\s*,', src)
    if not m:
        # DEFINE_*_EVENT(name) helper macros
        m2 = re.search(r'\bDEFINE_(\w+?)_EVENT\(\s*' + re.escape(ev) + r'\s*\)', src)
        if m2:
            print(f'### {ev}: via macro DEFINE_{m2.group(1)}_EVENT at line {line_of(m2.start())}')
            mm = re.search(r'#define DEFINE_' + m2.group(1) + r'_EVENT\(name\)\s*\\\s*\nDEFINE_EVENT\((\w+)', src)
            cls = mm.group(1) if mm else None
            print(f'    class {cls}')
            if cls:
                c = re.search(r'\bDECLARE_EVENT_CLASS\(\s*' + re.escape(cls) + r'\s*,', src)
                print(f'    class at line {line_of(c.start())}'); print(block(c.start()))
            print(); continue
        print(f'### {ev}: NOT FOUND\n'); continue
    cls = m.group(1)
    c = re.search(r'\bDECLARE_EVENT_CLASS\(\s*' + re.escape(cls) + r'\s*,', src)
    print(f'### {ev}: DEFINE_EVENT({cls}) at line {line_of(m.start())}; class at line {line_of(c.start()) if c else "?"}')
    if c: print(block(c.start()))
    print()
