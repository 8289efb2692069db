#!/usr/bin/env bash
# test_allocator.sh: yardd runs on the allocator configure chose (README, Scheduling at scale:
# tcmalloc, where present, placed a quarter more gangs a second than the C library's malloc).
#  1. with HAVE_TCMALLOC in config.h, every library's malloc, calloc, realloc and free
#     resolve to tcmalloc's (a link line with the library after the C library, or a linker
#     dropping it as unneeded, would leave the C library's in place without a word);
#  2. a member says in its log which allocator it runs on.
. "$(dirname "$0")/lib.sh"

config="$top_builddir/config.h"
[ -f "$config" ] || fail "no $config: run from a configured build tree"
if grep -q '^#define HAVE_TCMALLOC 1' "$config"; then
	want='yardd: memory allocator gperftools '
	bin=$(command -v "$YARDD") || fail "no $YARDD on PATH"
	# LD_BIND_NOW: every symbol resolved at start-up, not only those called before exit
	bindings=$(LD_BIND_NOW=1 LD_DEBUG=bindings "$bin" --no-such-option 2>&1 >/dev/null |
		grep -E "normal symbol \`(malloc|calloc|realloc|free)'" || true)
	[ -n "$bindings" ] || fail "LD_DEBUG=bindings shows no malloc binding of $bin"
	elsewhere=$(grep -v ' to [^ ]*libtcmalloc' <<<"$bindings" || true)
	[ -z "$elsewhere" ] || fail "malloc not from tcmalloc: $(head -3 <<<"$elsewhere")"
	note "$(wc -l <<<"$bindings") malloc/calloc/realloc/free bindings, all to tcmalloc"
else
	want="yardd: memory allocator: the C library's malloc"
fi

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
grep -q "$want" "$T/log.1" || fail "the member's log does not say '$want': $(head -5 "$T/log.1")"
note "the member's log says: $(grep -o 'yardd: memory allocator.*' "$T/log.1")"
note "ok"
