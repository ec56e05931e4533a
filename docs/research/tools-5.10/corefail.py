import re, sys, collections
for path in sys.argv[1:]:
    last = {}
    fails = collections.defaultdict(set)
    for line in open(path):
        m = re.match(r"libbpf: prog '([^']+)': relo #(\d+): (<[a-z_0-9]+>) \[\d+\] (.*?)( \(.*\))?$", line.strip())
        if m and 'matching candidate' not in line:
            last[(m.group(1), m.group(2))] = (m.group(3), m.group(4))
            continue
        m = re.match(r"libbpf: prog '([^']+)': relo #(\d+): no matching targets found", line.strip())
        if m:
            kind, what = last.get((m.group(1), m.group(2)), ('?', '?'))
            fails[(kind, what)].add(m.group(1))
    print(f'== {path}')
    for (kind, what), progs in sorted(fails.items()):
        tag = '(intended probe)' if kind in ('<field_exists>', '<enumval_exists>', '<type_exists>', '<type_matches>') else 'UNRESOLVED'
        print(f'  {tag:16} {kind:16} {what}   [{len(progs)} progs: {", ".join(sorted(progs))[:200]}]')
