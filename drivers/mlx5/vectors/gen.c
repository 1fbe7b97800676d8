/*
 * Conformance-vector generator for rdma-pmd-mlx5 (format v1).
 *
 * Builds RC RDMA WRITE / WRITE_WITH_IMM WQEs and 64-byte CQEs using only rdma-core's public
 * <infiniband/mlx5dv.h>: mlx5dv_set_ctrl_seg(), mlx5dv_set_data_seg(), struct mlx5_wqe_*_seg,
 * struct mlx5_cqe64 / mlx5_err_cqe, mlx5dv_get_cqe_owner() / mlx5dv_get_cqe_opcode(), plus the
 * post-send policy of rdma-core's providers/mlx5/qp.c and cq.c (ds counting, zero-length SGEs
 * skipped, inline segment with wrap at the queue end, fm_ce_se composition, bytes 8..11 of the
 * control segment zeroed, doorbell record, BlueFlame rule, CQE ownership test).
 *
 * It shares no code with the Rust builder it checks. Output goes to stdout.
 *
 *   cc -O2 -Wall -o mlx5-vecgen gen.c && ./mlx5-vecgen > mlx5-generated.txt
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

#define BF_BUF_SIZE 256 /* bf_reg_size 512 / 2 */
#define MAX_WQE_CNT 256
#define MAX_SGE_GEN 64
#define MAX_INLINE_GEN 1024
#define F_SIGNALED 1u
#define F_SOLICITED 2u
#define F_FENCE 4u
#define F_INLINE 8u
#define F_SIG_ALL 16u

struct sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct wr {
	char name[64];
	uint8_t opcode;
	uint32_t qpn;
	uint32_t imm; /* as a number; the wire carries htobe32(imm) */
	uint64_t raddr;
	uint32_t rkey;
	unsigned flags;
	int nsge;
	struct sge sg[MAX_SGE_GEN];
	int npieces; /* inline: per-piece lengths */
	int piece[8];
	int inline_len;
};

struct out {
	unsigned ds, wqebbs;
	uint8_t fm_ce_se;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void hexdump(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

/*
 * Post one WR into a ring of wqe_cnt 64-byte slots at WQE counter pi, following
 * _mlx5_post_send() for IBV_QPT_RC and IBV_WR_RDMA_WRITE[_WITH_IMM].
 */
static struct out post(uint8_t *sq, unsigned wqe_cnt, uint16_t pi, const struct wr *w)
{
	uint8_t *qend = sq + (size_t)wqe_cnt * MLX5_SEND_WQE_BB;
	uint8_t *seg = sq + (size_t)(pi & (wqe_cnt - 1)) * MLX5_SEND_WQE_BB;
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)seg;
	struct out o;
	unsigned size;
	uint8_t fence = (w->flags & F_FENCE) ? MLX5_WQE_CTRL_FENCE : 0;
	uint8_t sig_bits = (w->flags & F_SIG_ALL) ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	uint32_t imm_be = w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? htobe32(w->imm) : 0;

	/* qp.c: *(uint32_t *)(seg + 8) = 0; then fm_ce_se */
	*(uint32_t *)(seg + 8) = 0;
	o.fm_ce_se = sig_bits | fence |
		     ((w->flags & F_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
		     ((w->flags & F_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0);
	seg += sizeof(*ctrl);
	size = sizeof(*ctrl) / 16;

	/* set_raddr_seg */
	struct mlx5_wqe_raddr_seg *r = (void *)seg;
	r->raddr = htobe64(w->raddr);
	r->rkey = htobe32(w->rkey);
	r->reserved = 0;
	seg += sizeof(*r);
	size += sizeof(*r) / 16;

	if (w->flags & F_INLINE) {
		/* set_data_inl_seg: header, payload wrapping at qend, padded size */
		struct mlx5_wqe_inl_data_seg *h = (void *)seg;
		uint8_t *p = seg + sizeof(*h);
		int inl = 0, k = 0;
		for (int i = 0; i < w->npieces; i++) {
			int len = w->piece[i];
			uint8_t buf[MAX_INLINE_GEN];
			for (int j = 0; j < len; j++)
				buf[j] = (uint8_t)(0x30 + k++);
			uint8_t *src = buf;
			inl += len;
			if (p + len > qend) {
				int copy = (int)(qend - p);
				memcpy(p, src, copy);
				src += copy;
				len -= copy;
				p = sq;
			}
			memcpy(p, src, len);
			p += len;
		}
		if (inl) {
			h->byte_count = htobe32(inl | MLX5_INLINE_SEG);
			size += (inl + sizeof(h->byte_count) + 15) / 16;
		}
	} else {
		for (int i = 0; i < w->nsge; i++) {
			if (seg == qend)
				seg = sq;
			if (w->sg[i].length) {
				mlx5dv_set_data_seg((void *)seg, w->sg[i].length, w->sg[i].lkey,
						    (uintptr_t)w->sg[i].addr);
				seg += sizeof(struct mlx5_wqe_data_seg);
				size += sizeof(struct mlx5_wqe_data_seg) / 16;
			}
		}
	}

	mlx5dv_set_ctrl_seg(ctrl, pi, w->opcode, 0, w->qpn, o.fm_ce_se, (uint8_t)size, 0, imm_be);
	o.ds = size;
	o.wqebbs = (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	return o;
}

static unsigned bf_len(int nreq, unsigned ds)
{
	if (nreq == 1 && ds > 1 && ds <= BF_BUF_SIZE / 16)
		return (ds * 16 + 63) & ~63u;
	return 0;
}

static void print_flags(unsigned f)
{
	const char *names[] = { "signaled", "solicited", "fence", "inline", "sq_sig_all" };
	const unsigned bits[] = { F_SIGNALED, F_SOLICITED, F_FENCE, F_INLINE, F_SIG_ALL };
	int first = 1;
	for (int i = 0; i < 5; i++) {
		if (f & bits[i]) {
			printf("%s%s", first ? "" : ",", names[i]);
			first = 0;
		}
	}
	if (first)
		printf("-");
}

static int ncases;

static void emit_case(const struct wr *w, uint16_t pi, unsigned wqe_cnt)
{
	static uint8_t sq[MAX_WQE_CNT * MLX5_SEND_WQE_BB];
	memset(sq, 0, sizeof(sq));
	struct out o = post(sq, wqe_cnt, pi, w);
	uint16_t next = (uint16_t)(pi + o.wqebbs);

	printf("case %s opcode=0x%02x opmod=0x00 pi=%u qpn=0x%06x ds=%u wqebbs=%u fm_ce_se=0x%02x "
	       "sig=0x00 imm=0x%08x raddr=0x%016llx rkey=0x%08x flags=",
	       w->name, w->opcode, pi, w->qpn & 0xffffff, o.ds, o.wqebbs, o.fm_ce_se,
	       w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? w->imm : 0,
	       (unsigned long long)w->raddr, w->rkey);
	print_flags(w->flags);
	printf(" sq_wqe_cnt=%u slots=", wqe_cnt);
	for (unsigned i = 0; i < o.wqebbs; i++)
		printf("%s%u", i ? "," : "", (pi + i) & (wqe_cnt - 1));
	if (w->flags & F_INLINE) {
		printf(" sges=- inline_lens=");
		for (int i = 0; i < w->npieces; i++)
			printf("%s%d", i ? "," : "", w->piece[i]);
		if (!w->npieces)
			printf("-");
		printf(" inline=");
		for (int k = 0; k < w->inline_len; k++)
			printf("%02x", (uint8_t)(0x30 + k));
		if (!w->inline_len)
			printf("-");
	} else {
		printf(" sges=");
		for (int i = 0; i < w->nsge; i++)
			printf("%s0x%llx:%u:0x%x", i ? "," : "", (unsigned long long)w->sg[i].addr,
			       w->sg[i].length, w->sg[i].lkey);
		if (!w->nsge)
			printf("-");
		printf(" inline=-");
	}
	printf("\nwqe ");
	for (unsigned i = 0; i < o.wqebbs; i++)
		hexdump(sq + (size_t)((pi + i) & (wqe_cnt - 1)) * 64, 64);
	uint32_t dbrec = htobe32(next & 0xffff);
	printf("\ndbrec ");
	hexdump((uint8_t *)&dbrec, 4);
	printf("\nuar ");
	hexdump(sq + (size_t)(pi & (wqe_cnt - 1)) * 64, 8);
	printf("\nbf %u\nend\n", bf_len(1, o.ds));
	ncases++;
}

static void emit_ring(const char *name, unsigned wqe_cnt, uint16_t start, struct wr *ws, int n)
{
	static uint8_t sq[MAX_WQE_CNT * MLX5_SEND_WQE_BB];
	memset(sq, 0, sizeof(sq));
	uint16_t pi = start;
	struct out o = { 0, 0, 0 };
	uint16_t last = start;
	for (int i = 0; i < n; i++) {
		last = pi;
		o = post(sq, wqe_cnt, pi, &ws[i]);
		pi = (uint16_t)(pi + o.wqebbs);
	}
	printf("ring %s wqe_cnt=%u start_pi=%u posts=", name, wqe_cnt, start);
	for (int i = 0; i < n; i++)
		printf("%s%s", i ? "," : "", ws[i].name);
	printf(" end_pi=%u\nimage ", pi);
	hexdump(sq, (size_t)wqe_cnt * 64);
	uint32_t dbrec = htobe32(pi & 0xffff);
	printf("\ndbrec ");
	hexdump((uint8_t *)&dbrec, 4);
	printf("\nuar ");
	hexdump(sq + (size_t)(last & (wqe_cnt - 1)) * 64, 8);
	printf("\nbf %u\nend\n", bf_len(n, o.ds));
}

static void base_wr(struct wr *w, const char *name, uint8_t opcode, unsigned flags)
{
	memset(w, 0, sizeof(*w));
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->opcode = opcode;
	w->qpn = 0x000123;
	w->imm = opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? 0xdeadbeef : 0;
	w->raddr = 0x00007f0011223344ull;
	w->rkey = 0xa1b2c3d4;
	w->flags = flags;
}

static void fill_sges(struct wr *w, int n, int zero_every)
{
	w->nsge = n;
	for (int i = 0; i < n; i++) {
		w->sg[i].addr = 0x7fab00000000ull + (rnd() & 0xffffffffull);
		w->sg[i].length = (zero_every && i % zero_every == zero_every - 1)
					  ? 0
					  : (uint32_t)(1 + rnd() % 0x100000);
		w->sg[i].lkey = (uint32_t)rnd();
	}
}

static int nonzero(const struct wr *w)
{
	int n = 0;
	for (int i = 0; i < w->nsge; i++)
		n += w->sg[i].length != 0;
	return n;
}

static void set_inline(struct wr *w, int len, int npieces)
{
	w->flags |= F_INLINE;
	w->inline_len = len;
	w->npieces = npieces;
	int left = len;
	for (int i = 0; i < npieces; i++) {
		int take = i == npieces - 1 ? left : (int)(rnd() % (left + 1));
		w->piece[i] = take;
		left -= take;
	}
}

/* CQE records ------------------------------------------------------------------------- */

enum { K_REQ, K_REQ_ERR, K_INVALID };

static void emit_cqe(const char *name, int kind, uint8_t s_op, uint32_t qpn, uint16_t wqe_counter,
		     uint8_t syndrome, uint8_t vendor, uint64_t ts, uint32_t uidx, uint32_t byte_cnt,
		     int owner, unsigned ci, unsigned cqe_cnt)
{
	uint8_t buf[64];
	struct mlx5_cqe64 *c = (void *)buf;
	struct mlx5_err_cqe *e = (void *)buf;
	memset(buf, 0, sizeof(buf));
	c->srqn_uidx = htobe32(uidx);
	c->byte_cnt = htobe32(byte_cnt);
	if (kind == K_REQ_ERR) {
		e->vendor_err_synd = vendor;
		e->syndrome = syndrome;
		ts = 0;
	} else {
		c->timestamp = htobe64(ts);
		syndrome = 0;
		vendor = 0;
	}
	c->sop_drop_qpn = htobe32(((uint32_t)s_op << 24) | (qpn & 0xffffff));
	c->wqe_counter = htobe16(wqe_counter);
	uint8_t op = kind == K_REQ ? MLX5_CQE_REQ : kind == K_REQ_ERR ? MLX5_CQE_REQ_ERR : MLX5_CQE_INVALID;
	c->op_own = (uint8_t)(op << 4) | (owner & 1);
	/* cq.c get_sw_cqe */
	int sw = mlx5dv_get_cqe_opcode(c) != MLX5_CQE_INVALID &&
		 !((c->op_own & MLX5_CQE_OWNER_MASK) ^ !!(ci & cqe_cnt));
	uint32_t ci_db = htobe32((ci + 1) & 0xffffff);
	printf("cqe %s kind=%s op_own=0x%02x opcode=%u owner=%u wqe_counter=%u qpn=0x%06x "
	       "s_wqe_opcode=0x%02x byte_cnt=0x%08x timestamp=0x%016llx srqn_uidx=0x%06x "
	       "syndrome=0x%02x vendor_err=0x%02x cq_index=%u cqe_cnt=%u sw_owned=%d\nbytes ",
	       name, kind == K_REQ ? "req" : kind == K_REQ_ERR ? "req_err" : "invalid", c->op_own,
	       mlx5dv_get_cqe_opcode(c), mlx5dv_get_cqe_owner(c), wqe_counter, qpn & 0xffffff, s_op,
	       byte_cnt, (unsigned long long)ts, uidx, syndrome, vendor, ci, cqe_cnt, sw);
	hexdump(buf, 64);
	printf("\nci_dbrec ");
	hexdump((uint8_t *)&ci_db, 4);
	printf("\nend\n");
}

int main(void)
{
	struct wr w;
	char name[64];

	printf("# mlx5 RDMA-WRITE conformance vectors, format v1, generated by drivers/mlx5/vectors/gen.c\n");
	printf("# from rdma-core's <infiniband/mlx5dv.h> helpers and the mlx5 provider's post-send policy.\n");

	/* 1..62 SGEs, with and without zero-length ones, at several counters (wraps included). */
	const uint16_t pis[] = { 0, 5, 60, 63, 0xfff0, 0xffff };
	for (int n = 0; n <= 62; n++) {
		for (int z = 0; z < 3; z++) {
			int zero_every = z == 0 ? 0 : z == 1 ? 2 : 5;
			uint16_t pi = pis[(n + z) % 6];
			snprintf(name, sizeof(name), "sge_n%d_z%d_pi%u", n, zero_every, pi);
			base_wr(&w, name, (n + z) % 2 ? MLX5_OPCODE_RDMA_WRITE_IMM : MLX5_OPCODE_RDMA_WRITE,
				F_SIGNALED);
			fill_sges(&w, n, zero_every);
			if (2 + nonzero(&w) > 63)
				continue;
			emit_case(&w, pi, 64);
		}
	}
	/* The largest WQE (ds 63, 16 WQEBBs) across the end of small rings. */
	for (int cnt = 16; cnt <= 64; cnt *= 2) {
		snprintf(name, sizeof(name), "sge_ds63_cnt%d", cnt);
		base_wr(&w, name, MLX5_OPCODE_RDMA_WRITE, 0);
		fill_sges(&w, 62, 0);
		w.sg[30].length = 0;
		emit_case(&w, (uint16_t)(cnt - 3), cnt);
	}
	/* Inline payloads 0..224 bytes, in 1..3 pieces, crossing blocks and the ring end. */
	for (int len = 0; len <= 224; len++) {
		uint16_t pi = (uint16_t)(len % 3 == 0 ? 0xffff : len % 3 == 1 ? 62 : len);
		snprintf(name, sizeof(name), "inline_%d_pi%u", len, pi);
		base_wr(&w, name, len % 4 == 1 ? MLX5_OPCODE_RDMA_WRITE_IMM : MLX5_OPCODE_RDMA_WRITE,
			F_SIGNALED);
		w.imm = (uint32_t)rnd();
		set_inline(&w, len, len == 0 ? 0 : 1 + len % 3);
		emit_case(&w, pi, 64);
	}
	/* Inline in a tiny ring: the payload wraps twice around the queue end. */
	for (int len = 100; len <= 220; len += 40) {
		snprintf(name, sizeof(name), "inline_%d_ring4", len);
		base_wr(&w, name, MLX5_OPCODE_RDMA_WRITE, 0);
		set_inline(&w, len, 2);
		emit_case(&w, 7, 4);
	}
	/* Every flag combination, both opcodes, gather and inline. */
	for (unsigned f = 0; f < 32; f++) {
		for (int op = 0; op < 2; op++) {
			unsigned flags = f & ~F_INLINE;
			int inl = (f & F_INLINE) != 0;
			snprintf(name, sizeof(name), "flags_%02x_%s", f, op ? "imm" : "write");
			base_wr(&w, name, op ? MLX5_OPCODE_RDMA_WRITE_IMM : MLX5_OPCODE_RDMA_WRITE, flags);
			w.imm = 0x01020304u * (f + 1);
			if (inl)
				set_inline(&w, 20 + f, 2);
			else
				fill_sges(&w, 1 + f % 4, 0);
			emit_case(&w, (uint16_t)(f * 7 + op), 64);
		}
	}
	/* QP numbers, immediates, remote addresses at their extremes. */
	const uint32_t qpns[] = { 0, 1, 0x123, 0xabcdef, 0xffffff };
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "qpn_%06x", qpns[i]);
		base_wr(&w, name, MLX5_OPCODE_RDMA_WRITE_IMM, F_SIGNALED | F_SOLICITED);
		w.qpn = qpns[i];
		w.imm = i == 4 ? 0xffffffffu : (uint32_t)rnd();
		w.raddr = i == 4 ? 0 : rnd();
		w.rkey = (uint32_t)rnd();
		fill_sges(&w, 2, 0);
		/* The highest remote range there is: its last byte at 2^64 - 1 (a message may not
		 * wrap the address space). */
		if (i == 4)
			w.raddr = 0 - (uint64_t)w.sg[0].length - w.sg[1].length;
		emit_case(&w, (uint16_t)(i * 1000), 64);
	}

	/* Batches: several WRs with one doorbell into small zeroed rings. */
	struct wr batch[8];
	const struct {
		unsigned cnt;
		uint16_t start;
		int n;
	} rings[] = { { 8, 0, 3 }, { 8, 6, 4 }, { 16, 0xfffe, 5 }, { 16, 13, 6 }, { 32, 0xffe5, 8 },
		      { 8, 3, 1 } };
	for (int r = 0; r < 6; r++) {
		for (int i = 0; i < rings[r].n; i++) {
			struct wr *b = &batch[i];
			snprintf(name, sizeof(name), "batch%d_wr%d", r, i);
			base_wr(b, name, i % 3 == 2 ? MLX5_OPCODE_RDMA_WRITE_IMM : MLX5_OPCODE_RDMA_WRITE,
				i == rings[r].n - 1 ? F_SIGNALED : 0);
			b->imm = (uint32_t)rnd();
			if (i % 2)
				set_inline(b, (int)(rnd() % 90), 2);
			else
				fill_sges(b, 1 + (int)(rnd() % 5), 3);
			emit_case(b, 0, rings[r].cnt);
		}
		snprintf(name, sizeof(name), "batch%d", r);
		emit_ring(name, rings[r].cnt, rings[r].start, batch, rings[r].n);
	}

	/* CQEs: three laps of an 8-entry CQ and wrap of a 256-entry CQ; both owner values. */
	for (unsigned cnt = 8; cnt <= 256; cnt *= 32) {
		for (unsigned ci = 0; ci < 3 * cnt; ci += cnt == 8 ? 1 : 37) {
			for (int owner = 0; owner < 2; owner++) {
				snprintf(name, sizeof(name), "req_cnt%u_ci%u_own%d", cnt, ci, owner);
				emit_cqe(name, K_REQ, ci % 2 ? MLX5_OPCODE_RDMA_WRITE_IMM : MLX5_OPCODE_RDMA_WRITE,
					 0x000123 + ci, (uint16_t)(ci * 3), 0, 0,
					 0x0011223344556677ull + ci, 0x42 + ci, 0x1000 + ci, owner, ci, cnt);
				snprintf(name, sizeof(name), "invalid_cnt%u_ci%u_own%d", cnt, ci, owner);
				emit_cqe(name, K_INVALID, 0, 0, 0, 0, 0, 0, 0, 0, owner, ci, cnt);
			}
		}
	}
	/* Error CQEs: every syndrome mlx5dv.h names, and unknown ones. */
	const uint8_t synd[] = { 0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13,
				 0x14, 0x15, 0x16, 0x22, 0x00, 0x03, 0x33, 0x93, 0xff };
	for (int i = 0; i < (int)sizeof(synd); i++) {
		for (int owner = 0; owner < 2; owner++) {
			unsigned ci = (unsigned)(i * 29 + owner * 256) & 0xffffff;
			snprintf(name, sizeof(name), "err_synd%02x_own%d", synd[i], owner);
			emit_cqe(name, K_REQ_ERR, i % 2 ? MLX5_OPCODE_RDMA_WRITE_IMM : MLX5_OPCODE_RDMA_WRITE,
				 0x1234ab ^ (unsigned)i, (uint16_t)(0xfff0 + i), synd[i], (uint8_t)(0x80 + i), 0,
				 0x42, 0, owner, ci, 256);
		}
	}
	/* Consumer index at the 24-bit doorbell wrap. */
	emit_cqe("req_ci_24bit_wrap", K_REQ, MLX5_OPCODE_RDMA_WRITE, 0x7, 0xffff, 0, 0, 1, 0, 0, 1,
		 0xffffff, 1u << 16);
	fprintf(stderr, "gen: %d cases\n", ncases);
	return 0;
}
