/* schedule.c: generates GPipe, 1F1B and interleaved-1F1B instruction lists (schedule.h) and
 * simulates sets of them to prove they are complete, matched and deadlock-free. Pure: no I/O,
 * no clocks; the trainer executes the lists. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dataplane/schedule.h"

const char *sched_kind_name(enum sched_kind kind)
{
	switch (kind) {
	case SCHED_GPIPE:
		return "gpipe";
	case SCHED_1F1B:
		return "1f1b";
	case SCHED_INTERLEAVED:
		return "interleaved";
	}
	return "?";
}

const char *sched_op_name(enum sched_op op)
{
	static const char *const names[] = {"FORWARD",  "BACKWARD",  "SEND_ACT",
	                                    "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};
	return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

int sched_prev(int p, int v, int stage, int chunk, int *peer_stage, int *peer_chunk)
{
	int vs = chunk * p + stage;
	if (vs == 0)
		return -1;
	*peer_stage = (vs - 1) % p;
	*peer_chunk = (vs - 1) / p;
	return 0;
}

int sched_next(int p, int v, int stage, int chunk, int *peer_stage, int *peer_chunk)
{
	int vs = chunk * p + stage;
	if (vs == p * v - 1)
		return -1;
	*peer_stage = (vs + 1) % p;
	*peer_chunk = (vs + 1) / p;
	return 0;
}

static void emit(struct sched_program *prog, enum sched_op op, int mb, int chunk)
{
	prog->instr[prog->count++] = (struct sched_instr){.op = op, .mb = mb, .chunk = chunk};
}

/* One compute step with the communication around it. */
static void emit_compute(struct sched_program *prog, int backward, int mb, int chunk)
{
	int ps, pc;
	int has_prev = sched_prev(prog->p, prog->v, prog->stage, chunk, &ps, &pc) == 0;
	int has_next = sched_next(prog->p, prog->v, prog->stage, chunk, &ps, &pc) == 0;
	if (!backward) {
		if (has_prev)
			emit(prog, SCHED_RECV_ACT, mb, chunk);
		emit(prog, SCHED_FORWARD, mb, chunk);
		if (has_next)
			emit(prog, SCHED_SEND_ACT, mb, chunk);
	} else {
		if (has_next)
			emit(prog, SCHED_RECV_GRAD, mb, chunk);
		emit(prog, SCHED_BACKWARD, mb, chunk);
		if (has_prev)
			emit(prog, SCHED_SEND_GRAD, mb, chunk);
	}
}

/* Megatron's interleaved order: the k-th forward (backward) of a stage runs micro-batch
 * (k / (p v)) p + k % p on chunk (k / p) % v (backward: v - 1 - that). */
static void interleaved_unit(int p, int v, int k, int backward, int *mb, int *chunk)
{
	int c = (k / p) % v;
	*chunk = backward ? v - 1 - c : c;
	*mb = (k / (p * v)) * p + k % p;
}

int sched_build(enum sched_kind kind, int p, int v, int m, int stage, struct sched_program *out,
                struct yard_err *err)
{
	memset(out, 0, sizeof *out);
	if (p < 1 || p > 64)
		return yard_err_set(err, YARD_EINVAL, "parallel.pp: %d stages (1..64 supported)",
		                    p);
	if (stage < 0 || stage >= p)
		return yard_err_set(err, YARD_EINVAL, "schedule: stage %d outside 0..%d", stage,
		                    p - 1);
	if (m < 1)
		return yard_err_set(err, YARD_EINVAL, "parallel.micro_batches: %d, need >= 1", m);
	if (v < 1)
		return yard_err_set(err, YARD_EINVAL, "parallel.virtual_stages: %d, need >= 1", v);
	if (kind != SCHED_INTERLEAVED && v != 1)
		return yard_err_set(
		    err, YARD_EINVAL,
		    "parallel.virtual_stages: %d, but only the interleaved schedule "
		    "runs more than one chunk per stage (schedule %s)",
		    v, sched_kind_name(kind));
	if (kind == SCHED_INTERLEAVED && m % p != 0)
		return yard_err_set(err, YARD_EINVAL,
		                    "parallel.micro_batches: the interleaved schedule needs micro "
		                    "batches divisible by the pipeline stages (m %d, pp %d)",
		                    m, p);
	out->kind = kind;
	out->p = p;
	out->v = v;
	out->m = m;
	out->stage = stage;
	out->instr = calloc((size_t)6 * m * v, sizeof *out->instr);
	if (!out->instr)
		return yard_err_set(err, YARD_ENOMEM, "schedule: out of memory");
	int total = m * v, warmup;
	switch (kind) {
	case SCHED_GPIPE:
		for (int mb = 0; mb < m; mb++)
			emit_compute(out, 0, mb, 0);
		for (int mb = 0; mb < m; mb++)
			emit_compute(out, 1, mb, 0);
		break;
	case SCHED_1F1B:
		warmup = YARD_MIN(p - stage - 1, m);
		for (int mb = 0; mb < warmup; mb++)
			emit_compute(out, 0, mb, 0);
		for (int k = 0; k < m - warmup; k++) {
			emit_compute(out, 0, warmup + k, 0);
			emit_compute(out, 1, k, 0);
		}
		for (int mb = m - warmup; mb < m; mb++)
			emit_compute(out, 1, mb, 0);
		break;
	case SCHED_INTERLEAVED:
		warmup = YARD_MIN((p - stage - 1) * 2 + (v - 1) * p, total);
		for (int k = 0; k < total; k++) {
			int mb, chunk;
			if (k < warmup) {
				interleaved_unit(p, v, k, 0, &mb, &chunk);
				emit_compute(out, 0, mb, chunk);
				continue;
			}
			interleaved_unit(p, v, k, 0, &mb, &chunk);
			emit_compute(out, 0, mb, chunk);
			interleaved_unit(p, v, k - warmup, 1, &mb, &chunk);
			emit_compute(out, 1, mb, chunk);
		}
		for (int k = total - warmup; k < total; k++) {
			int mb, chunk;
			interleaved_unit(p, v, k, 1, &mb, &chunk);
			emit_compute(out, 1, mb, chunk);
		}
		break;
	}
	return 0;
}

void sched_program_free(struct sched_program *prog)
{
	free(prog->instr);
	memset(prog, 0, sizeof *prog);
}

/* ---- simulator ---- */

struct sim {
	int p, v, m;
	/* per (stage, chunk, mb): */
	unsigned char *forwarded, *backwarded, *act_in, *grad_in;
	/* messages in flight, keyed by (kind, destination vstage, mb): arrival time, or < 0 */
	double *msg_time;
	int *msg_count;          /* sent, not yet received */
	unsigned char *msg_sent; /* ever sent */
};

static size_t sim_at(const struct sim *s, int stage, int chunk, int mb)
{
	return ((size_t)stage * s->v + chunk) * s->m + mb;
}

static size_t msg_at(const struct sim *s, int grad, int vstage, int mb)
{
	return ((size_t)grad * s->p * s->v + vstage) * s->m + mb;
}

int sched_check(const struct sched_program *progs, int p, double forward_cost, double backward_cost,
                struct sched_stats *stats, struct yard_err *err)
{
	if (p < 1 || p > 64)
		return yard_err_set(err, YARD_EINVAL, "sched_check: %d stages (1..64)", p);
	int v = progs[0].v, m = progs[0].m;
	for (int s = 0; s < p; s++)
		if (progs[s].p != p || progs[s].v != v || progs[s].m != m || progs[s].stage != s)
			return yard_err_set(err, YARD_EINVAL,
			                    "stage %d: program built for p %d v %d m %d stage %d",
			                    s, progs[s].p, progs[s].v, progs[s].m, progs[s].stage);
	struct sim sim = {.p = p, .v = v, .m = m};
	size_t cells = (size_t)p * v * m;
	sim.forwarded = calloc(cells, 1);
	sim.backwarded = calloc(cells, 1);
	sim.act_in = calloc(cells, 1);
	sim.grad_in = calloc(cells, 1);
	sim.msg_time = calloc(2 * cells, sizeof(double));
	sim.msg_count = calloc(2 * cells, sizeof(int));
	sim.msg_sent = calloc(2 * cells, 1);
	int pc[64] = {0}, in_flight[64] = {0};
	double now[64] = {0};
	int rc = 0;
	memset(stats, 0, sizeof *stats);
	if (!sim.forwarded || !sim.backwarded || !sim.act_in || !sim.grad_in || !sim.msg_time ||
	    !sim.msg_count || !sim.msg_sent) {
		rc = yard_err_set(err, YARD_ENOMEM, "sched_check: out of memory");
		goto out;
	}
	for (;;) {
		int progressed = 0, done = 1;
		for (int s = 0; s < p; s++) {
			const struct sched_program *prog = &progs[s];
			while (pc[s] < prog->count) {
				const struct sched_instr *in = &prog->instr[pc[s]];
				int c = in->chunk, mb = in->mb, ps, pcnk;
				if (c < 0 || c >= v || mb < 0 || mb >= m) {
					rc = yard_err_set(
					    err, YARD_EINVAL,
					    "stage %d instr %d: %s(mb %d, chunk %d) out of "
					    "range",
					    s, pc[s], sched_op_name(in->op), mb, c);
					goto out;
				}
				size_t at = sim_at(&sim, s, c, mb);
				int vs = c * p + s;
				const char *bad = NULL;
				switch (in->op) {
				case SCHED_FORWARD:
					if (sim.forwarded[at])
						bad = "forwarded twice";
					else if (vs > 0 && !sim.act_in[at])
						bad = "forward before its input activation arrived";
					else {
						sim.forwarded[at] = 1;
						now[s] += forward_cost / v;
						stats->busy[s] += forward_cost / v;
						if (++in_flight[s] > stats->peak_in_flight[s])
							stats->peak_in_flight[s] = in_flight[s];
					}
					break;
				case SCHED_BACKWARD:
					if (!sim.forwarded[at])
						bad = "backward before forward";
					else if (sim.backwarded[at])
						bad = "backwarded twice";
					else if (vs < p * v - 1 && !sim.grad_in[at])
						bad = "backward before its output gradient arrived";
					else {
						sim.backwarded[at] = 1;
						now[s] += backward_cost / v;
						stats->busy[s] += backward_cost / v;
						in_flight[s]--;
					}
					break;
				case SCHED_SEND_ACT:
				case SCHED_SEND_GRAD: {
					int grad = in->op == SCHED_SEND_GRAD;
					int has = grad ? sched_prev(p, v, s, c, &ps, &pcnk) == 0
					               : sched_next(p, v, s, c, &ps, &pcnk) == 0;
					if (!has)
						bad = "send past the end of the pipeline";
					else if (grad ? !sim.backwarded[at] : !sim.forwarded[at])
						bad = "send of data not yet computed";
					else {
						size_t k = msg_at(&sim, grad, pcnk * p + ps, mb);
						if (sim.msg_sent[k])
							bad = "sent twice";
						sim.msg_sent[k] = 1;
						sim.msg_count[k]++;
						sim.msg_time[k] = now[s];
						stats->messages++;
					}
					break;
				}
				case SCHED_RECV_ACT:
				case SCHED_RECV_GRAD: {
					int grad = in->op == SCHED_RECV_GRAD;
					int has = grad ? sched_next(p, v, s, c, &ps, &pcnk) == 0
					               : sched_prev(p, v, s, c, &ps, &pcnk) == 0;
					unsigned char *got = grad ? sim.grad_in : sim.act_in;
					size_t k = msg_at(&sim, grad, vs, mb);
					if (!has)
						bad = "receive past the end of the pipeline";
					else if (got[at])
						bad = "received twice";
					else if (sim.msg_count[k] == 0)
						goto blocked; /* the sender has not got there yet */
					else {
						sim.msg_count[k]--;
						got[at] = 1;
						if (sim.msg_time[k] > now[s])
							now[s] = sim.msg_time[k];
					}
					break;
				}
				default:
					bad = "unknown instruction";
				}
				if (bad) {
					rc = yard_err_set(
					    err, YARD_EINVAL,
					    "stage %d instr %d: %s(mb %d, chunk %d): %s", s, pc[s],
					    sched_op_name(in->op), mb, c, bad);
					goto out;
				}
				pc[s]++;
				progressed = 1;
			}
		blocked:
			if (pc[s] < prog->count)
				done = 0;
		}
		if (done)
			break;
		if (!progressed) {
			char where[256] = "";
			size_t len = 0;
			for (int s = 0; s < p && len < sizeof where - 40; s++)
				if (pc[s] < progs[s].count) {
					const struct sched_instr *in = &progs[s].instr[pc[s]];
					len += (size_t)snprintf(where + len, sizeof where - len,
					                        " stage %d at %s(mb %d, chunk %d);",
					                        s, sched_op_name(in->op), in->mb,
					                        in->chunk);
				}
			rc = yard_err_set(err, YARD_EINVAL, "deadlock:%s", where);
			goto out;
		}
	}
	for (int s = 0; s < p; s++)
		for (int c = 0; c < v; c++)
			for (int mb = 0; mb < m; mb++) {
				size_t at = sim_at(&sim, s, c, mb);
				if (!sim.forwarded[at] || !sim.backwarded[at]) {
					rc = yard_err_set(
					    err, YARD_EINVAL,
					    "stage %d: micro-batch %d chunk %d never %s", s, mb, c,
					    sim.forwarded[at] ? "backwarded" : "forwarded");
					goto out;
				}
			}
	for (size_t k = 0; k < 2 * cells; k++)
		if (sim.msg_count[k] != 0) {
			int grad = (int)(k / cells), vs = (int)(k % cells / m), mb = (int)(k % m);
			rc = yard_err_set(err, YARD_EINVAL,
			                  "%s for virtual stage %d micro-batch %d sent but never "
			                  "received",
			                  grad ? "gradient" : "activation", vs, mb);
			goto out;
		}
	for (int s = 0; s < p; s++)
		if (now[s] > stats->makespan)
			stats->makespan = now[s];
	for (int s = 0; s < p; s++)
		stats->bubble_fraction[s] =
		    stats->makespan > 0 ? 1.0 - stats->busy[s] / stats->makespan : 0.0;
out:
	free(sim.forwarded);
	free(sim.backwarded);
	free(sim.act_in);
	free(sim.grad_in);
	free(sim.msg_time);
	free(sim.msg_count);
	free(sim.msg_sent);
	return rc;
}
