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
 * Extensions (drivers/mlx5/vectors/FORMAT.md), emitted after every v1 record: RDMA READ,
 * SEND/SEND_IMM (RC and UD, with the RoCE v2 address vector of mlx5_create_ah()), ATOMIC_CS/FA,
 * the fence rules around them, `recv` records (mlx5_post_recv() and the RQ geometry of
 * verbs.c), and responder / READ / atomic CQEs with the ibv_wc fields cq.c derives from them.
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
#define F_SMALL_FENCE 32u /* qp->fm_cache == MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE before the post */

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
	/* Extensions (all zero for the RC WRITE records): */
	int ext;	   /* print the extended header keys */
	int ud;		   /* qp_type: 0 = RC, 1 = UD */
	int prev_opcode;   /* informational: opcode of the previous WR on the QP, -1 none */
	uint64_t swap;	   /* ATOMIC_CS: wr.atomic.swap */
	uint64_t cmp_add;  /* ATOMIC_CS: wr.atomic.compare_add (compare); ATOMIC_FA: the add value */
	struct ud_addr {
		uint32_t dqpn, qkey, flow_label;
		uint16_t sport_rand; /* the random port mlx5_ah_set_udp_sport draws when fl == 0 */
		uint8_t dgid[16], dmac[6];
		uint8_t hop_limit, tclass, sgid_index, sl, static_rate;
	} ah;
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

/* ib_to_mlx5_rate_table, verbs.c (v44) */
static const uint8_t ib_to_mlx5_rate[] = { 0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11,
					    13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0 };

/* The UDP source port mlx5_ah_set_udp_sport() puts in av.rlid for a RoCE v2 GID. */
static uint16_t ah_sport(const struct ud_addr *a)
{
	uint32_t fl = a->flow_label & IB_GRH_FLOWLABEL_MASK;
	return fl ? ibv_flow_label_to_udp_sport(fl) : a->sport_rand;
}

/*
 * The address vector mlx5_create_ah() builds for a RoCE v2 (Ethernet, is_global) AH:
 * the AH is calloc'ed, then rlid = sport, stat_rate_sl = rate<<4 | (sl&7)<<1, fl_mlid
 * untouched (0), GRH bit (grh_gid_fl bit 30) 0 on Ethernet, sgid_index<<20 | flow_label,
 * tclass, hop_limit, rgid = dgid, rmac = the resolved destination MAC.
 */
static void make_av(struct mlx5_wqe_av *av, const struct ud_addr *a)
{
	uint8_t rate = a->static_rate < sizeof(ib_to_mlx5_rate) ? ib_to_mlx5_rate[a->static_rate] : 0;
	memset(av, 0, sizeof(*av));
	av->rlid = htobe16(ah_sport(a));
	av->stat_rate_sl = (uint8_t)((rate << 4) | ((a->sl & 0x7) << 1));
	av->tclass = a->tclass;
	av->hop_limit = a->hop_limit;
	av->grh_gid_fl = htobe32((0u << 30) | ((uint32_t)(a->sgid_index & 0xff) << 20) |
				 (a->flow_label & IB_GRH_FLOWLABEL_MASK));
	memcpy(av->rgid, a->dgid, 16);
	memcpy(av->rmac, a->dmac, 6);
}

static int is_imm_op(uint8_t op)
{
	return op == MLX5_OPCODE_RDMA_WRITE_IMM || op == MLX5_OPCODE_SEND_IMM;
}

static int is_atomic_op(uint8_t op)
{
	return op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA;
}

/*
 * Post one WR into a ring of wqe_cnt 64-byte slots at WQE counter pi, following
 * _mlx5_post_send() for IBV_QPT_RC (RDMA_WRITE[_WITH_IMM], RDMA_READ, SEND[_WITH_IMM],
 * ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD) and IBV_QPT_UD (SEND[_WITH_IMM]).
 */
static struct out post(uint8_t *sq, unsigned wqe_cnt, uint16_t pi, const struct wr *w)
{
	uint8_t *qend = sq + (size_t)wqe_cnt * MLX5_SEND_WQE_BB;
	uint8_t *seg = sq + (size_t)(pi & (wqe_cnt - 1)) * MLX5_SEND_WQE_BB;
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)seg;
	struct out o;
	unsigned size;
	/* fence = IBV_SEND_FENCE ? MLX5_WQE_CTRL_FENCE : qp->fm_cache (qp.c:857-860) */
	uint8_t fence = (w->flags & F_FENCE)	     ? MLX5_WQE_CTRL_FENCE
			: (w->flags & F_SMALL_FENCE) ? MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE
						     : 0;
	uint8_t sig_bits = (w->flags & F_SIG_ALL) ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	/* send_ieth(): imm_data for SEND_WITH_IMM and RDMA_WRITE_WITH_IMM, else 0 */
	uint32_t imm_be = is_imm_op(w->opcode) ? htobe32(w->imm) : 0;

	/* qp.c: *(uint32_t *)(seg + 8) = 0; then fm_ce_se */
	*(uint32_t *)(seg + 8) = 0;
	o.fm_ce_se = sig_bits | fence |
		     ((w->flags & F_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
		     ((w->flags & F_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0);
	seg += sizeof(*ctrl);
	size = sizeof(*ctrl) / 16;

	if (w->ud) {
		/* set_datagram_seg: memcpy the AH's av, then dqp_dct and qkey */
		struct mlx5_wqe_datagram_seg *d = (void *)seg;
		struct mlx5_wqe_av av;
		make_av(&av, &w->ah);
		memcpy(&d->av, &av, sizeof(d->av));
		d->av.dqp_dct = htobe32(w->ah.dqpn | MLX5_EXTENDED_UD_AV);
		d->av.key.qkey.qkey = htobe32(w->ah.qkey);
		/* Cross-check against the public helper on a zeroed segment (it leaves
		 * av.reserved0 alone; the provider's memcpy writes the calloc'ed zeros). */
		struct mlx5_wqe_datagram_seg t;
		memset(&t, 0, sizeof(t));
		mlx5dv_set_dgram_seg(&t, (uint64_t)w->ah.qkey << 32, w->ah.dqpn, 1, av.stat_rate_sl,
				     av.fl_mlid, ah_sport(&w->ah), av.rmac, av.tclass, av.hop_limit,
				     be32toh(av.grh_gid_fl), av.rgid);
		if (memcmp(&t, d, sizeof(t))) {
			fprintf(stderr, "gen: datagram segment mismatch in %s\n", w->name);
			exit(1);
		}
		seg += sizeof(*d);
		size += sizeof(*d) / 16;
		if (seg == qend)
			seg = sq;
	} else if (w->opcode == MLX5_OPCODE_RDMA_WRITE || w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
		   w->opcode == MLX5_OPCODE_RDMA_READ) {
		/* set_raddr_seg */
		struct mlx5_wqe_raddr_seg *r = (void *)seg;
		r->raddr = htobe64(w->raddr);
		r->rkey = htobe32(w->rkey);
		r->reserved = 0;
		seg += sizeof(*r);
		size += sizeof(*r) / 16;
	} else if (is_atomic_op(w->opcode)) {
		struct mlx5_wqe_raddr_seg *r = (void *)seg;
		r->raddr = htobe64(w->raddr);
		r->rkey = htobe32(w->rkey);
		r->reserved = 0;
		seg += sizeof(*r);
		/* _set_atomic_seg: CS writes swap_add = swap, compare = compare_add;
		 * FA writes only swap_add = compare_add (compare is left as it was) */
		struct mlx5_wqe_atomic_seg *at = (void *)seg;
		if (w->opcode == MLX5_OPCODE_ATOMIC_CS) {
			at->swap_add = htobe64(w->swap);
			at->compare = htobe64(w->cmp_add);
		} else {
			at->swap_add = htobe64(w->cmp_add);
		}
		seg += sizeof(*at);
		size += (sizeof(*r) + sizeof(*at)) / 16;
	}
	/* RC SEND / SEND_IMM: no segment between ctrl and data */

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
				/* set_data_ptr_seg_atomic: byte_count is MLX5_ATOMIC_SIZE (8) */
				uint32_t bc = is_atomic_op(w->opcode) ? 8 : w->sg[i].length;
				mlx5dv_set_data_seg((void *)seg, bc, w->sg[i].lkey,
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
	const char *names[] = { "signaled", "solicited", "fence", "inline", "sq_sig_all",
				"small_fence_pending" };
	const unsigned bits[] = { F_SIGNALED, F_SOLICITED, F_FENCE, F_INLINE, F_SIG_ALL, F_SMALL_FENCE };
	int first = 1;
	for (int i = 0; i < 6; i++) {
		if (f & bits[i]) {
			printf("%s%s", first ? "" : ",", names[i]);
			first = 0;
		}
	}
	if (first)
		printf("-");
}

static void print_hex(const char *key, const uint8_t *p, size_t n)
{
	printf(" %s=", key);
	hexdump(p, n);
}

/* Header keys of the extended case records (appended after the v1 keys). */
static void print_ext(const struct wr *w)
{
	printf(" qp_type=%s", w->ud ? "ud" : "rc");
	if (w->opcode == MLX5_OPCODE_ATOMIC_CS)
		printf(" swap=0x%016llx compare=0x%016llx", (unsigned long long)w->swap,
		       (unsigned long long)w->cmp_add);
	if (w->opcode == MLX5_OPCODE_ATOMIC_FA)
		printf(" add=0x%016llx", (unsigned long long)w->cmp_add);
	if (w->ud) {
		const struct ud_addr *a = &w->ah;
		printf(" dqpn=0x%06x qkey=0x%08x", a->dqpn, a->qkey);
		print_hex("dgid", a->dgid, 16);
		print_hex("dmac", a->dmac, 6);
		printf(" sport=%u hop_limit=%u tclass=%u flow_label=0x%05x sgid_index=%u sl=%u "
		       "static_rate=%u",
		       ah_sport(a), a->hop_limit, a->tclass, a->flow_label, a->sgid_index, a->sl,
		       a->static_rate);
	}
	if (w->prev_opcode >= 0)
		printf(" prev_opcode=0x%02x", w->prev_opcode);
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
	       is_imm_op(w->opcode) ? w->imm : 0,
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
	if (w->ext)
		print_ext(w);
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

/* ====================================================================================
 * Extensions: READ, SEND, atomics, UD, receive WQEs, responder CQEs (see FORMAT.md).
 * Emitted after every v1 record, so the v1 records (and the random stream they use)
 * are unchanged.
 * ==================================================================================== */

static void new_wr(struct wr *w, const char *name, uint8_t opcode, unsigned flags)
{
	base_wr(w, name, opcode, flags);
	w->ext = 1;
	w->prev_opcode = -1;
	if (is_imm_op(opcode))
		w->imm = (uint32_t)rnd();
}

static void set_ah(struct wr *w, uint32_t dqpn, uint32_t qkey, uint32_t fl)
{
	struct ud_addr *a = &w->ah;
	w->ud = 1;
	w->raddr = 0; /* not used on UD: printed as 0 */
	w->rkey = 0;
	a->dqpn = dqpn;
	a->qkey = qkey;
	a->flow_label = fl;
	a->sport_rand = (uint16_t)(0xc000 + rnd() % 0x4000);
	/* an IPv4-mapped RoCE v2 GID ::ffff:192.168.x.y, or a random IPv6 one */
	memset(a->dgid, 0, 16);
	if (rnd() % 2) {
		a->dgid[10] = a->dgid[11] = 0xff;
		a->dgid[12] = 192;
		a->dgid[13] = 168;
		a->dgid[14] = (uint8_t)rnd();
		a->dgid[15] = (uint8_t)rnd();
	} else {
		a->dgid[0] = 0xfe;
		a->dgid[1] = 0x80;
		for (int i = 8; i < 16; i++)
			a->dgid[i] = (uint8_t)rnd();
	}
	for (int i = 0; i < 6; i++)
		a->dmac[i] = (uint8_t)rnd();
	a->dmac[0] &= 0xfe; /* unicast */
	a->hop_limit = 64;
	a->tclass = 0;
	a->sgid_index = 3;
	a->sl = 0;
	a->static_rate = 0;
}

static void gen_read_cases(void)
{
	struct wr w;
	char name[64];
	const int ns[] = { 1, 2, 3, 4, 16, 30, 61 };
	const uint16_t pis[] = { 0, 7, 62, 63, 0xfffe, 0xffff, 40 };

	for (int i = 0; i < 7; i++) {
		for (int z = 0; z < 3; z++) {
			int zero_every = z == 0 ? 0 : z == 1 ? 2 : 3;
			uint16_t pi = pis[(i + z) % 7];
			snprintf(name, sizeof(name), "read_n%d_z%d_pi%u", ns[i], zero_every, pi);
			new_wr(&w, name, MLX5_OPCODE_RDMA_READ, (i + z) % 2 ? 0 : F_SIGNALED);
			w.raddr = rnd();
			w.rkey = (uint32_t)rnd();
			fill_sges(&w, ns[i], zero_every);
			emit_case(&w, pi, 64);
		}
	}
	/* All SGEs zero-length: ds 2 (ctrl + raddr only). */
	new_wr(&w, "read_all_zero_len", MLX5_OPCODE_RDMA_READ, F_SIGNALED);
	fill_sges(&w, 3, 1);
	emit_case(&w, 9, 64);
	/* The largest READ (ds 63) across the end of a 16-entry ring. */
	new_wr(&w, "read_ds63_cnt16", MLX5_OPCODE_RDMA_READ, F_SIGNALED);
	fill_sges(&w, 62, 0);
	w.sg[17].length = 0;
	emit_case(&w, 14, 16);
	/* Flags, including the fence forms. */
	for (unsigned f = 0; f < 64; f++) {
		if (f & F_INLINE) /* READ is never inline here (see FORMAT.md) */
			continue;
		snprintf(name, sizeof(name), "read_flags_%02x", f);
		new_wr(&w, name, MLX5_OPCODE_RDMA_READ, f);
		fill_sges(&w, 1 + f % 3, 0);
		emit_case(&w, (uint16_t)(f * 5), 64);
	}
}

/* WRs right after a READ or an atomic: the provider adds no fence of its own. */
static void gen_fence_cases(void)
{
	struct wr w;
	char name[64];
	const uint8_t prevs[] = { MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA };
	const uint8_t nexts[] = { MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_SEND,
				  MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA };
	for (int p = 0; p < 3; p++) {
		for (int n = 0; n < 6; n++) {
			for (int fe = 0; fe < 3; fe++) {
				unsigned flags = F_SIGNALED | (fe == 1 ? F_FENCE : 0) |
						 (fe == 2 ? F_FENCE | F_SMALL_FENCE : 0);
				snprintf(name, sizeof(name), "after_%02x_%02x_%s", prevs[p], nexts[n],
					 fe == 0 ? "nofence" : fe == 1 ? "fence" : "fence_small");
				new_wr(&w, name, nexts[n], flags);
				w.prev_opcode = prevs[p];
				w.swap = rnd();
				w.cmp_add = rnd();
				fill_sges(&w, is_atomic_op(nexts[n]) ? 1 : 2, 0);
				if (is_atomic_op(nexts[n]))
					w.sg[0].length = 8;
				emit_case(&w, (uint16_t)(100 + p * 20 + n * 3 + fe), 64);
			}
		}
	}
}

static void gen_send_cases(void)
{
	struct wr w;
	char name[64];
	/* Gather SENDs: 0..8, 16, 30, 61 SGEs. */
	const int ns[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 30, 61 };
	for (int i = 0; i < 12; i++) {
		for (int op = 0; op < 2; op++) {
			int zero_every = (i + op) % 3 == 2 ? 2 : 0;
			uint16_t pi = (uint16_t)(i % 4 == 3 ? 0xffff : i % 4 == 2 ? 61 : i * 11);
			snprintf(name, sizeof(name), "send%s_n%d_z%d_pi%u", op ? "imm" : "", ns[i],
				 zero_every, pi);
			new_wr(&w, name, op ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND,
			       F_SIGNALED | (i % 2 ? F_SOLICITED : 0));
			w.raddr = 0;
			w.rkey = 0;
			fill_sges(&w, ns[i], zero_every);
			emit_case(&w, pi, 64);
		}
	}
	/* Inline SENDs 0..200 bytes, crossing blocks and the ring end. */
	for (int len = 0; len <= 200; len += (len < 70 ? 1 : 7)) {
		uint16_t pi = (uint16_t)(len % 3 == 0 ? 0xffff : len % 3 == 1 ? 63 : len);
		int op = len % 2;
		snprintf(name, sizeof(name), "send%s_inline_%d_pi%u", op ? "imm" : "", len, pi);
		new_wr(&w, name, op ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND, F_SIGNALED);
		w.raddr = 0;
		w.rkey = 0;
		set_inline(&w, len, len == 0 ? 0 : 1 + len % 3);
		emit_case(&w, pi, 64);
	}
	/* Inline with SGEs that are all zero-length: no inline header, ds 1. */
	new_wr(&w, "send_inline_zero_pieces", MLX5_OPCODE_SEND, F_SIGNALED);
	w.raddr = 0;
	w.rkey = 0;
	set_inline(&w, 0, 2);
	emit_case(&w, 3, 64);
	/* Inline wrapping around a 4-entry ring; 236 bytes fill all four slots. */
	for (int len = 120; len <= 236; len += 58) {
		snprintf(name, sizeof(name), "send_inline_%d_ring4", len);
		new_wr(&w, name, MLX5_OPCODE_SEND_IMM, F_SOLICITED);
		w.raddr = 0;
		w.rkey = 0;
		set_inline(&w, len, 3);
		emit_case(&w, 6, 4);
	}
	/* Flags. */
	for (unsigned f = 0; f < 64; f++) {
		snprintf(name, sizeof(name), "send_flags_%02x", f);
		new_wr(&w, name, f % 3 ? MLX5_OPCODE_SEND : MLX5_OPCODE_SEND_IMM, f);
		w.raddr = 0;
		w.rkey = 0;
		if (f & F_INLINE)
			set_inline(&w, 10 + (int)f, 2);
		else
			fill_sges(&w, 1 + f % 3, 0);
		emit_case(&w, (uint16_t)(f * 9 + 1), 64);
	}
}

static void gen_atomic_cases(void)
{
	struct wr w;
	char name[64];
	const uint64_t vals[][2] = { { 0, 0 },
				     { 1, 0 },
				     { 0xffffffffffffffffull, 0x8000000000000000ull },
				     { 0x0123456789abcdefull, 0xfedcba9876543210ull },
				     { 0x1122334455667788ull, 0x99aabbccddeeff00ull } };
	for (int op = 0; op < 2; op++) {
		uint8_t opc = op ? MLX5_OPCODE_ATOMIC_FA : MLX5_OPCODE_ATOMIC_CS;
		for (int i = 0; i < 5; i++) {
			for (int f = 0; f < 4; f++) {
				unsigned flags = (f & 1 ? F_SIGNALED : 0) | (f & 2 ? F_FENCE : 0);
				uint16_t pi = (uint16_t)(i == 4 ? 0xffff - f : i * 13 + f);
				snprintf(name, sizeof(name), "%s_v%d_f%d_pi%u", op ? "fadd" : "cswap", i, f, pi);
				new_wr(&w, name, opc, flags);
				w.raddr = rnd() & ~7ull;
				w.rkey = (uint32_t)rnd();
				w.swap = vals[i][0];
				w.cmp_add = vals[i][1];
				fill_sges(&w, 1, 0);
				w.sg[0].length = 8;
				w.sg[0].addr &= ~7ull;
				emit_case(&w, pi, 64);
			}
		}
		/* The provider writes byte_count 8 whatever the SGE length, skips zero-length
		 * SGEs and gives every further SGE its own 8-byte data segment. */
		snprintf(name, sizeof(name), "%s_sge_len16", op ? "fadd" : "cswap");
		new_wr(&w, name, opc, F_SIGNALED);
		w.swap = rnd();
		w.cmp_add = rnd();
		fill_sges(&w, 1, 0);
		w.sg[0].length = 16;
		emit_case(&w, 20, 64);
		snprintf(name, sizeof(name), "%s_sge_zero_then_8", op ? "fadd" : "cswap");
		new_wr(&w, name, opc, F_SIGNALED);
		w.swap = rnd();
		w.cmp_add = rnd();
		fill_sges(&w, 2, 0);
		w.sg[0].length = 0;
		w.sg[1].length = 8;
		emit_case(&w, 21, 64);
		snprintf(name, sizeof(name), "%s_small_fence", op ? "fadd" : "cswap");
		new_wr(&w, name, opc, F_SIGNALED | F_SMALL_FENCE);
		w.swap = rnd();
		w.cmp_add = rnd();
		fill_sges(&w, 1, 0);
		w.sg[0].length = 8;
		emit_case(&w, 22, 64);
		snprintf(name, sizeof(name), "%s_sq_sig_all_solicited", op ? "fadd" : "cswap");
		new_wr(&w, name, opc, F_SIG_ALL | F_SOLICITED);
		w.swap = rnd();
		w.cmp_add = rnd();
		fill_sges(&w, 1, 0);
		w.sg[0].length = 8;
		emit_case(&w, 23, 64);
	}
}

static void gen_ud_cases(void)
{
	struct wr w;
	char name[64];
	/* Gather UD sends: 0..4, 12 (ds 16, the BlueFlame limit), 13, 30 SGEs. */
	const int ns[] = { 0, 1, 2, 3, 4, 12, 13, 30 };
	for (int i = 0; i < 8; i++) {
		for (int op = 0; op < 2; op++) {
			int zero_every = (i + op) % 3 == 2 ? 3 : 0;
			uint16_t pi = (uint16_t)(i % 3 == 0 ? 63 : i % 3 == 1 ? 0xffff : i * 7);
			snprintf(name, sizeof(name), "ud_send%s_n%d_z%d_pi%u", op ? "imm" : "", ns[i],
				 zero_every, pi);
			new_wr(&w, name, op ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND,
			       F_SIGNALED | (i % 2 ? F_SOLICITED : 0));
			w.qpn = 0x000456;
			set_ah(&w, (uint32_t)(rnd() & 0xffffff), (uint32_t)rnd() & 0x7fffffff,
			       i % 2 ? (uint32_t)(rnd() & 0xfffff) : 0);
			fill_sges(&w, ns[i], zero_every);
			emit_case(&w, pi, 64);
		}
	}
	/* Inline UD sends 0..180 bytes; the payload starts in the WQE's second block. */
	for (int len = 0; len <= 180; len += (len < 40 ? 1 : 9)) {
		uint16_t pi = (uint16_t)(len % 3 == 0 ? 63 : len % 3 == 1 ? 0xffff : len);
		int op = len % 2;
		snprintf(name, sizeof(name), "ud_send%s_inline_%d_pi%u", op ? "imm" : "", len, pi);
		new_wr(&w, name, op ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND, F_SIGNALED);
		w.qpn = 0x000456;
		set_ah(&w, 0x000789, 0x11111111, (uint32_t)(len * 0x1357) & 0xfffff);
		set_inline(&w, len, len == 0 ? 0 : 1 + len % 3);
		emit_case(&w, pi, 64);
	}
	/* UD inline wrapping around a 4-entry ring. */
	new_wr(&w, "ud_send_inline_150_ring4", MLX5_OPCODE_SEND, 0);
	set_ah(&w, 0x000789, 0x11111111, 0);
	set_inline(&w, 150, 2);
	emit_case(&w, 3, 4);
	/* To the GSI QP (QP1) with the well-known Q_Key 0x80010000 (written as given). */
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "ud_qp1_%d", i);
		new_wr(&w, name, MLX5_OPCODE_SEND, F_SIGNALED);
		w.qpn = 0x000456;
		set_ah(&w, 1, 0x80010000u, i >= 2 ? 0x12345 : 0);
		if (i % 2)
			set_inline(&w, 24 + i, 1);
		else
			fill_sges(&w, 1, 0);
		emit_case(&w, (uint16_t)(i * 2), 64);
	}
	/* Address-vector fields at their extremes. */
	const struct {
		uint32_t dqpn, qkey, fl;
		uint8_t hop, tclass, sgid, sl, rate;
	} avs[] = {
		{ 0xffffff, 0xffffffff, 0xfffff, 255, 255, 255, 7, 7 },
		{ 0x000002, 0x00000000, 0x00001, 1, 0x6a, 0, 0, 2 },
		{ 0x800001, 0x7fffffff, 0x04000, 0, 0xb8, 1, 5, 16 },
		{ 0x123456, 0xdeadbeef, 0x00000, 64, 0x02, 128, 15, 22 },
		{ 0x00abcd, 0x00000001, 0xfc000, 2, 0x01, 17, 9, 30 },
		{ 0xfffffe, 0xcafef00d, 0x3ffff, 128, 0x80, 254, 3, 12 },
	};
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "ud_av_%d", i);
		new_wr(&w, name, i % 2 ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND,
		       F_SIGNALED | (i % 3 == 0 ? F_FENCE | F_SOLICITED : 0));
		w.qpn = i == 0 ? 0xffffff : 0x000456;
		set_ah(&w, avs[i].dqpn, avs[i].qkey, avs[i].fl);
		w.ah.hop_limit = avs[i].hop;
		w.ah.tclass = avs[i].tclass;
		w.ah.sgid_index = avs[i].sgid;
		w.ah.sl = avs[i].sl;
		w.ah.static_rate = avs[i].rate;
		fill_sges(&w, 2, 0);
		emit_case(&w, (uint16_t)(500 + i), 64);
	}
}

/* Several WRs with one doorbell: READ/atomics followed by fenced and unfenced WRs. */
static void gen_rings(void)
{
	struct wr b[6];
	char name[64];
	const uint8_t ops0[] = { MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_SEND,
				 MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_RDMA_READ };
	const unsigned fl0[] = { 0, 0, F_FENCE, 0, F_FENCE | F_SIGNALED };
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "vring0_wr%d", i);
		new_wr(&b[i], name, ops0[i], fl0[i]);
		b[i].prev_opcode = i ? ops0[i - 1] : -1;
		b[i].swap = rnd();
		b[i].cmp_add = rnd();
		if (ops0[i] == MLX5_OPCODE_SEND) {
			b[i].raddr = 0;
			b[i].rkey = 0;
		}
		if (i == 1)
			set_inline(&b[i], 70, 2);
		else
			fill_sges(&b[i], is_atomic_op(ops0[i]) ? 1 : 3, 0);
		if (is_atomic_op(ops0[i]))
			b[i].sg[0].length = 8;
		emit_case(&b[i], 0, 16);
	}
	emit_ring("vring0_read_fence", 16, 14, b, 5);

	const uint8_t ops1[] = { MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_SEND_IMM };
	const unsigned fl1[] = { F_SIGNALED, F_FENCE, F_FENCE | F_SIGNALED };
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "vring1_wr%d", i);
		new_wr(&b[i], name, ops1[i], fl1[i]);
		b[i].prev_opcode = i ? ops1[i - 1] : -1;
		b[i].swap = rnd();
		b[i].cmp_add = rnd();
		if (ops1[i] == MLX5_OPCODE_SEND_IMM) {
			b[i].raddr = 0;
			b[i].rkey = 0;
		}
		fill_sges(&b[i], 1, 0);
		if (is_atomic_op(ops1[i]))
			b[i].sg[0].length = 8;
		emit_case(&b[i], 0, 8);
	}
	emit_ring("vring1_atomic_fence", 8, 0xffff, b, 3);

	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "vring2_wr%d", i);
		new_wr(&b[i], name, i % 2 ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND,
		       i == 3 ? F_SIGNALED : 0);
		b[i].qpn = 0x000456;
		set_ah(&b[i], i == 2 ? 1 : 0x000789, i == 2 ? 0x80010000u : 0x11111111, 0);
		if (i % 2)
			set_inline(&b[i], 30 + 40 * i, 2);
		else
			fill_sges(&b[i], 2 + i, 0);
		emit_case(&b[i], 0, 8);
	}
	emit_ring("vring2_ud", 8, 6, b, 4);
}

/* recv records ------------------------------------------------------------------------- */

static unsigned roundup_pow2(unsigned v)
{
	unsigned r = 1;
	while (r < v)
		r <<= 1;
	return r;
}

static int nrecv;

/*
 * One ibv_post_recv() WR into a non-SRQ RQ, as mlx5_post_recv() writes it (qp.c), with the
 * RQ geometry of verbs.c mlx5_calc_rcv_wqe() / mlx5_calc_rq_size() and wq_sig off.
 */
static void emit_recv(const char *name, unsigned max_recv_sge, unsigned max_recv_wr, uint16_t head,
		      const struct sge *sg, int n)
{
	unsigned num_scatter = max_recv_sge ? max_recv_sge : 1;
	unsigned stride = roundup_pow2(16 * num_scatter);
	unsigned wq_size = roundup_pow2(max_recv_wr) * stride;
	if (wq_size < MLX5_SEND_WQE_BB)
		wq_size = MLX5_SEND_WQE_BB;
	unsigned wqe_cnt = wq_size / stride;
	unsigned max_gs = stride / (unsigned)sizeof(struct mlx5_wqe_data_seg);
	unsigned slot = head & (wqe_cnt - 1);
	uint8_t wqe[512];
	struct mlx5_wqe_data_seg *scat = (void *)wqe;
	unsigned j = 0;

	memset(wqe, 0, sizeof(wqe));
	for (int i = 0; i < n; i++) {
		if (!sg[i].length)
			continue;
		mlx5dv_set_data_seg(&scat[j++], sg[i].length, sg[i].lkey, (uintptr_t)sg[i].addr);
	}
	if (j < max_gs) {
		scat[j].byte_count = 0;
		scat[j].lkey = htobe32(MLX5_INVALID_LKEY);
		scat[j].addr = 0;
	}
	uint32_t dbrec = htobe32((uint16_t)(head + 1));

	printf("recv %s wqe_cnt=%u stride=%u max_sge=%u head=%u sges=", name, wqe_cnt, stride, max_gs,
	       head);
	for (int i = 0; i < n; i++)
		printf("%s0x%llx:%u:0x%x", i ? "," : "", (unsigned long long)sg[i].addr, sg[i].length,
		       sg[i].lkey);
	if (!n)
		printf("-");
	printf(" max_recv_sge=%u max_recv_wr=%u entries=%u terminator=%d\nwqe ", max_recv_sge,
	       max_recv_wr, j, j < max_gs);
	hexdump(wqe, stride);
	printf("\ndbrec ");
	hexdump((uint8_t *)&dbrec, 4);
	printf("\nslot %u\nend\n", slot);
	nrecv++;
}

static void gen_recv(void)
{
	struct sge sg[64];
	char name[64];
	const unsigned max_sges[] = { 0, 1, 2, 3, 4, 5, 8, 16, 30, 32 };
	const unsigned max_wrs[] = { 1, 4, 64, 100, 256, 3, 16, 2, 1000, 8 };
	for (int m = 0; m < 10; m++) {
		unsigned ms = max_sges[m] ? max_sges[m] : 1;
		unsigned max_gs = roundup_pow2(16 * ms) / 16;
		/* posting 0 .. max_gs SGEs (max_gs may exceed the requested max_recv_sge) */
		for (unsigned n = 0; n <= max_gs; n++) {
			if (max_gs > 8 && n > 3 && n != max_gs - 1 && n != max_gs && n != ms)
				continue;
			for (int z = 0; z < 2; z++) {
				if (z && n < 2)
					continue;
				uint16_t head = (uint16_t)(n % 3 == 0 ? 0xffff : n % 3 == 1 ? n * 3 : 0x7fff);
				for (unsigned i = 0; i < n; i++) {
					sg[i].addr = 0x7fcd00000000ull + (rnd() & 0xffffffffull);
					sg[i].length = (uint32_t)(1 + rnd() % 0x10000);
					sg[i].lkey = (uint32_t)rnd();
				}
				if (z)
					sg[(n - 1) / 2].length = 0;
				snprintf(name, sizeof(name), "recv_m%u_n%u_z%d_h%u", max_sges[m], n, z, head);
				emit_recv(name, max_sges[m], max_wrs[m], head, sg, (int)n);
			}
		}
	}
	/* Zero-length SGEs only; large lengths; head counts across the ring end. */
	for (int i = 0; i < 3; i++) {
		sg[i].addr = 0x1000 * (i + 1);
		sg[i].length = 0;
		sg[i].lkey = 0x100 + i;
	}
	emit_recv("recv_all_zero_len", 4, 16, 5, sg, 3);
	sg[0].addr = 0xffffffffffff0000ull;
	sg[0].length = 0x80000000u;
	sg[0].lkey = 0xffffffffu;
	sg[1].addr = 0;
	sg[1].length = 0xffffffffu;
	sg[1].lkey = 0;
	emit_recv("recv_extreme_values", 2, 8, 0, sg, 2);
	for (unsigned h = 0; h < 6; h++) {
		uint16_t head = (uint16_t)(0xfffd + h);
		sg[0].addr = 0x7fee00001000ull + h * 0x1000;
		sg[0].length = 4096;
		sg[0].lkey = 0x1234;
		snprintf(name, sizeof(name), "recv_wrap_h%u", head);
		emit_recv(name, 1, 4, head, sg, 1);
	}
}

/* Extended CQE records ------------------------------------------------------------------ */

enum { X_REQ, X_REQ_ERR, X_RESP_SEND, X_RESP_SEND_IMM, X_RESP_WR_IMM, X_RESP_ERR };

struct cqin {
	int kind, ud;
	uint8_t s_op, syndrome, vendor, ml_path;
	uint16_t wqe_counter, slid;
	uint32_t qpn, uidx, byte_cnt, flags_rqpn, imm;
	uint64_t ts;
	int owner;
	unsigned ci, cqe_cnt;
};

/* mlx5_handle_error_cqe() (cq.c) */
static int err_status(uint8_t synd)
{
	switch (synd) {
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
	default: return IBV_WC_GENERAL_ERR;
	}
}

static void print_opt(const char *key, int have, unsigned long long v, int hex)
{
	if (!have)
		printf(" %s=-", key);
	else if (hex)
		printf(" %s=0x%llx", key, v);
	else
		printf(" %s=%llu", key, v);
}

static int ncqe_x;

static void emit_cqe_x(const char *name, const struct cqin *in)
{
	static const char *kinds[] = { "req", "req_err", "resp_send", "resp_send_imm", "resp_wr_imm",
				       "resp_err" };
	static const uint8_t ops[] = { MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_SEND,
				       MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_WR_IMM, MLX5_CQE_RESP_ERR };
	uint8_t buf[64];
	struct mlx5_cqe64 *c = (void *)buf;
	struct mlx5_err_cqe *e = (void *)buf;
	int err = in->kind == X_REQ_ERR || in->kind == X_RESP_ERR;
	int resp = in->kind >= X_RESP_SEND;
	uint64_t ts = err ? 0 : in->ts;
	uint8_t synd = err ? in->syndrome : 0, vendor = err ? in->vendor : 0;
	uint8_t s_op = resp ? 0 : in->s_op;
	uint32_t flags_rqpn = (resp && !err) ? in->flags_rqpn : 0;
	uint32_t imm = (resp && !err) ? in->imm : 0;
	uint16_t slid = (resp && !err) ? in->slid : 0;
	uint8_t ml_path = (resp && !err) ? in->ml_path : 0;
	uint32_t byte_cnt = err ? 0 : in->byte_cnt;

	memset(buf, 0, sizeof(buf));
	c->ml_path = ml_path;
	c->slid = htobe16(slid);
	c->flags_rqpn = htobe32(flags_rqpn);
	c->srqn_uidx = htobe32(in->uidx);
	c->imm_inval_pkey = htobe32(imm);
	c->byte_cnt = htobe32(byte_cnt);
	if (err) {
		e->vendor_err_synd = vendor;
		e->syndrome = synd;
	} else {
		c->timestamp = htobe64(ts);
	}
	c->sop_drop_qpn = htobe32(((uint32_t)s_op << 24) | (in->qpn & 0xffffff));
	c->wqe_counter = htobe16(in->wqe_counter);
	c->op_own = (uint8_t)(ops[in->kind] << 4) | (in->owner & 1);
	int sw = mlx5dv_get_cqe_opcode(c) != MLX5_CQE_INVALID &&
		 !((c->op_own & MLX5_CQE_OWNER_MASK) ^ !!(in->ci & in->cqe_cnt));
	uint32_t ci_db = htobe32((in->ci + 1) & 0xffffff);

	printf("cqe %s kind=%s op_own=0x%02x opcode=%u owner=%u wqe_counter=%u qpn=0x%06x "
	       "s_wqe_opcode=0x%02x byte_cnt=0x%08x timestamp=0x%016llx srqn_uidx=0x%06x "
	       "syndrome=0x%02x vendor_err=0x%02x cq_index=%u cqe_cnt=%u sw_owned=%d",
	       name, kinds[in->kind], c->op_own, mlx5dv_get_cqe_opcode(c), mlx5dv_get_cqe_owner(c),
	       in->wqe_counter, in->qpn & 0xffffff, s_op, byte_cnt, (unsigned long long)ts, in->uidx,
	       synd, vendor, in->ci, in->cqe_cnt, sw);
	printf(" qp_type=%s flags_rqpn=0x%08x imm=0x%08x slid=0x%04x ml_path=0x%02x", in->ud ? "ud" : "rc",
	       flags_rqpn, imm, slid, ml_path);

	/* The provider's ibv_poll_cq() results (mlx5_parse_cqe, non-lazy path). */
	int have_op = 0, have_len = 0, have_imm = 0, have_resp = 0;
	unsigned wc_op = 0, wc_flags = 0, status = 0;
	uint32_t wc_len = 0;
	switch (in->kind) {
	case X_REQ: /* handle_good_req */
		have_op = 1;
		switch (s_op) {
		case MLX5_OPCODE_RDMA_WRITE_IMM:
			wc_flags |= IBV_WC_WITH_IMM;
			/* fall through */
		case MLX5_OPCODE_RDMA_WRITE:
			wc_op = IBV_WC_RDMA_WRITE;
			break;
		case MLX5_OPCODE_SEND_IMM:
			wc_flags |= IBV_WC_WITH_IMM;
			/* fall through */
		case MLX5_OPCODE_SEND:
			wc_op = IBV_WC_SEND;
			break;
		case MLX5_OPCODE_RDMA_READ:
			wc_op = IBV_WC_RDMA_READ;
			wc_len = byte_cnt;
			have_len = 1;
			break;
		case MLX5_OPCODE_ATOMIC_CS:
			wc_op = IBV_WC_COMP_SWAP;
			wc_len = 8;
			have_len = 1;
			break;
		case MLX5_OPCODE_ATOMIC_FA:
			wc_op = IBV_WC_FETCH_ADD;
			wc_len = 8;
			have_len = 1;
			break;
		default:
			have_op = 0;
		}
		break;
	case X_RESP_SEND:
	case X_RESP_SEND_IMM:
	case X_RESP_WR_IMM: /* handle_responder */
		have_op = have_len = have_resp = 1;
		wc_len = byte_cnt;
		wc_op = in->kind == X_RESP_WR_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
		if (in->kind != X_RESP_SEND) {
			wc_flags |= IBV_WC_WITH_IMM;
			have_imm = 1;
		}
		if ((flags_rqpn >> 28) & 3)
			wc_flags |= IBV_WC_GRH;
		break;
	default: /* REQ_ERR / RESP_ERR */
		status = (unsigned)err_status(synd);
	}
	printf(" wc_status=%u", status);
	print_opt("wc_opcode", have_op, wc_op, 0);
	print_opt("wc_byte_len", have_len, wc_len, 0);
	printf(" wc_flags=%u wc_qp_num=0x%06x", wc_flags, in->qpn & 0xffffff);
	print_opt("wc_vendor_err", err, vendor, 1);
	print_opt("wc_imm", have_imm, imm, 1);
	print_opt("wc_src_qp", have_resp, flags_rqpn & 0xffffff, 1);
	print_opt("wc_sl", have_resp, (flags_rqpn >> 24) & 0xf, 0);
	print_opt("wc_slid", have_resp, slid, 1);
	print_opt("wc_dlid_path_bits", have_resp, ml_path & 0x7f, 1);
	print_opt("wc_pkey_index", have_resp, imm & 0xffff, 1);
	printf("\nbytes ");
	hexdump(buf, 64);
	printf("\nci_dbrec ");
	hexdump((uint8_t *)&ci_db, 4);
	printf("\nend\n");
	ncqe_x++;
}

static void gen_cqes(void)
{
	struct cqin in;
	char name[64];
	/* Requester completions of READ, atomics, SEND, SEND_IMM. */
	const uint8_t req_ops[] = { MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA,
				    MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM };
	const uint32_t lens[] = { 0, 1, 8, 4096, 0x7fffffff, 0x80000000u, 0xffffffffu };
	for (int o = 0; o < 5; o++) {
		for (int l = 0; l < 7; l++) {
			memset(&in, 0, sizeof(in));
			in.kind = X_REQ;
			in.s_op = req_ops[o];
			in.qpn = 0x000123 + (uint32_t)(o * 0x10101);
			in.wqe_counter = (uint16_t)(0xfffa + l * 7);
			in.byte_cnt = lens[l];
			in.ts = 0x0102030405060708ull * (uint64_t)(l + 1);
			in.uidx = 0x42 + (uint32_t)o;
			in.owner = l % 2;
			in.ci = (unsigned)(l * 37 + o);
			in.cqe_cnt = 256;
			snprintf(name, sizeof(name), "req_%02x_len%u", req_ops[o], lens[l]);
			emit_cqe_x(name, &in);
		}
	}
	/* Requester errors of READ and atomics. */
	const uint8_t synd[] = { 0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13,
				 0x14, 0x15, 0x16, 0x22, 0x00, 0x03, 0x33, 0x93, 0xff };
	for (int i = 0; i < (int)sizeof(synd); i++) {
		memset(&in, 0, sizeof(in));
		in.kind = X_REQ_ERR;
		in.s_op = req_ops[i % 3];
		in.qpn = 0x00abcd;
		in.wqe_counter = (uint16_t)(i * 1111);
		in.syndrome = synd[i];
		in.vendor = (uint8_t)(0x50 + i);
		in.uidx = 7;
		in.owner = i % 2;
		in.ci = (unsigned)(i * 13);
		in.cqe_cnt = 64;
		snprintf(name, sizeof(name), "req_err_%02x_synd%02x", in.s_op, synd[i]);
		emit_cqe_x(name, &in);
	}
	/* Responder completions: RC and UD, with and without GRH, src_qp with high bits. */
	const uint32_t rqpns[] = { 0x000000, 0x000001, 0x000123, 0x800000, 0xabcdef, 0xffffff };
	const uint32_t blens[] = { 0, 40, 41, 4096, 1u << 30, 0x7fffffff, 0x80000000u, 0xffffffffu };
	int idx = 0;
	for (int k = X_RESP_SEND; k <= X_RESP_WR_IMM; k++) {
		for (int ud = 0; ud < 2; ud++) {
			for (int g = 0; g < 4; g++) {
				for (int q = 0; q < 6; q += (ud ? 1 : 2)) {
					if (k == X_RESP_WR_IMM && ud) /* no RDMA WRITE on UD */
						continue;
					memset(&in, 0, sizeof(in));
					in.kind = k;
					in.ud = ud;
					in.qpn = ud ? 0x000456 : 0x000123;
					in.wqe_counter = (uint16_t)(idx * 3);
					uint32_t sl = (uint32_t)(idx % 16);
					in.flags_rqpn = ((uint32_t)g << 28) | (sl << 24) | rqpns[q];
					/* RESP_SEND: the field holds the P_Key index; otherwise imm. */
					in.imm = k == X_RESP_SEND ? (uint32_t)(idx % 3 == 0 ? 0 : idx)
								  : (uint32_t)rnd();
					in.byte_cnt = blens[idx % 8];
					in.ts = rnd();
					in.uidx = 0x100 + (uint32_t)idx;
					in.slid = (uint16_t)(idx % 5 == 0 ? 0xffff : idx % 5 == 1 ? idx : 0);
					in.ml_path = (uint8_t)(idx % 4 == 0 ? 0xff : idx % 4 == 1 ? 0x05 : 0);
					in.owner = idx % 2;
					in.ci = (unsigned)(idx * 5) & 0xffffff;
					in.cqe_cnt = 16;
					snprintf(name, sizeof(name), "%s_%s_g%d_rqpn%06x_%d",
						 k == X_RESP_SEND ? "resp_send" : k == X_RESP_SEND_IMM ? "resp_send_imm"
									      : "resp_wr_imm",
						 ud ? "ud" : "rc", g, rqpns[q], idx);
					emit_cqe_x(name, &in);
					idx++;
				}
			}
		}
	}
	/* Immediates at their extremes; the provider also reads them as the P_Key index. */
	const uint32_t imms[] = { 0, 1, 0x0000ffff, 0xffff0000u, 0xffffffffu, 0xdeadbeef };
	for (int i = 0; i < 6; i++) {
		memset(&in, 0, sizeof(in));
		in.kind = i % 2 ? X_RESP_WR_IMM : X_RESP_SEND_IMM;
		in.qpn = 0x000123;
		in.flags_rqpn = 0x00000777;
		in.imm = imms[i];
		in.byte_cnt = (uint32_t)i;
		in.ts = 1;
		in.owner = 1;
		in.ci = 8;
		in.cqe_cnt = 8;
		snprintf(name, sizeof(name), "resp_imm_%08x", imms[i]);
		emit_cqe_x(name, &in);
	}
	/* Responder errors. */
	for (int i = 0; i < (int)sizeof(synd); i++) {
		for (int ud = 0; ud < 2; ud++) {
			memset(&in, 0, sizeof(in));
			in.kind = X_RESP_ERR;
			in.ud = ud;
			in.qpn = ud ? 0x000456 : 0x000123;
			in.wqe_counter = (uint16_t)(i * 7);
			in.syndrome = synd[i];
			in.vendor = (uint8_t)(0x60 + i);
			in.uidx = 9;
			in.owner = (i + ud) % 2;
			in.ci = (unsigned)(i * 17 + ud * 512);
			in.cqe_cnt = 512;
			snprintf(name, sizeof(name), "resp_err_%s_synd%02x", ud ? "ud" : "rc", synd[i]);
			emit_cqe_x(name, &in);
		}
	}
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

	/* Extensions (FORMAT.md in this directory). */
	int v1_cases = ncases;
	printf("# Extended records (READ, SEND, atomics, UD, recv, responder CQEs): see\n");
	printf("# drivers/mlx5/vectors/FORMAT.md. Readers ignore unknown keys and may skip unknown records.\n");
	gen_read_cases();
	gen_fence_cases();
	gen_send_cases();
	gen_atomic_cases();
	gen_ud_cases();
	gen_rings();
	gen_recv();
	gen_cqes();
	fprintf(stderr, "gen: %d cases (%d v1, %d extended), %d recv, %d extended cqe\n", ncases,
		v1_cases, ncases - v1_cases, nrecv, ncqe_x);
	return 0;
}
