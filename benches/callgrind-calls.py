#!/usr/bin/env python3
"""Calls counted by callgrind to the functions whose names match a pattern,
summed over callgrind output files: by default jemalloc's entry points for
allocating (malloc, mallocx, calloc, realloc, rallocx), so the figure is the
allocations (reallocations included) the process made.

    benches/callgrind-calls.py FILE... [--match REGEX]

benches/proxy-instructions.sh and benches/request-instructions.py print
it per chunk and per request beside the instructions."""
import re, sys

ALLOCATIONS = r'^_rjem_(malloc|mallocx|calloc|realloc|rallocx)$'


def calls(paths, pattern=ALLOCATIONS):
    wanted = re.compile(pattern)
    total = 0
    for path in paths:
        names, target = {}, None
        with open(path, errors='replace') as f:
            for line in f:
                if line.startswith('cfn='):
                    # `cfn=(id) name`, or `cfn=(id)` for a name given before,
                    # or `cfn=name` without compression.
                    spec = line[4:].strip()
                    m = re.match(r'\((\d+)\)\s*(.*)', spec)
                    if m:
                        if m.group(2):
                            names[m.group(1)] = m.group(2)
                        name = names.get(m.group(1), '')
                    else:
                        name = spec
                    target = bool(wanted.search(name))
                elif line.startswith('fn='):
                    spec = line[3:].strip()
                    m = re.match(r'\((\d+)\)\s*(.*)', spec)
                    if m and m.group(2):
                        names[m.group(1)] = m.group(2)
                elif line.startswith('calls=') and target:
                    total += int(line[6:].split()[0])
                    target = None
                elif line.startswith('calls='):
                    target = None
    return total


if __name__ == '__main__':
    args = sys.argv[1:]
    pattern = ALLOCATIONS
    if '--match' in args:
        i = args.index('--match')
        pattern = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    print(calls(args, pattern))
