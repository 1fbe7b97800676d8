/*
 * wire_peer: the project's own verbs peer for the `wire` tier. It runs on rdma-core (rxe in the
 * tier's guest) and exercises an RC connection with the other side in one of two roles, checking
 * every byte on its side:
 *
 *   target     exposes a region (1 MiB of data, then 8 bytes for atomics) with remote write,
 *              read and atomic rights, posts receives, and when told "done" checks that the
 *              region holds the pattern, the atomics area its final value, and each receive the
 *              bytes and immediate the plan says;
 *   initiator  runs the plan against the other side's region: WRITEs of sizes from 1 byte to
 *              most of 1 MiB tiling the data, READs of the same pieces back (compared), SENDs,
 *              a WRITE with immediate, then fetch-and-add, compare-and-swap, fetch-and-add
 *              (each original value compared). With --bad-rkey it instead makes one WRITE with
 *              a wrong rkey and expects IBV_WC_REM_ACCESS_ERR.
 *
 * The plan is fixed (see the constants below) and the same in the Rust side of the tier
 * (drivers/mlx5/tests/wire.rs). Connection setup is a TCP exchange of one line each way,
 * "QPN PSN GID ADDR RKEY LEN" (hex; the GID as 32 hex digits in byte order); whoever is given a
 * host connects, the other listens. After the plan the initiator sends "done\n" (or, after the
 * wrong-rkey WRITE, "badkey\n": the target then checks its data is untouched) and the target
 * answers "ok\n" or "bad ...\n". An initiator that ran a load of its own instead of the plan
 * (the demo's wire backend, which checks what it wrote by READing it back) sends "bye\n"; the
 * target answers "ok\n" and checks nothing.
 *
 * Usage: wire_peer -d DEV -g GID_INDEX -r target|initiator [-p PORT] [-s SEED] [--bad-rkey] [HOST]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define DATA_LEN (1u << 20)
#define ATOMIC_OFF DATA_LEN
#define REGION_LEN (DATA_LEN + 64)
#define RECV_SLOT 4096u
#define ATOMIC_INIT 0x1000ull
#define IMM_VALUE 0x12345678u
#define WAIT_S 60

/* Write (and read back) pieces tiling the data: the last one takes the rest. */
static const uint32_t PIECES[] = {1, 7, 64, 1000, 1024, 1025, 4096, 12345, 65536, 0};
#define NPIECES (sizeof PIECES / sizeof PIECES[0])
/* SEND sizes, one receive slot each, then the WRITE with immediate's slot. */
static const uint32_t SENDS[] = {1, 100, 1024, 1025, 4096};
#define NSENDS (sizeof SENDS / sizeof SENDS[0])
#define IMM_WRITE_OFF 100u
#define IMM_WRITE_LEN 16u

static uint8_t pattern(uint32_t seed, uint64_t i)
{
	return (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

static uint32_t piece_len(unsigned k, uint64_t off)
{
	return PIECES[k] ? PIECES[k] : (uint32_t)(DATA_LEN - off);
}

struct dest {
	uint32_t qpn, psn, rkey, len;
	uint64_t addr;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "wire_peer: %s (%s)\n", what, strerror(errno));
	exit(2);
}

static int tcp_exchange(const char *host, int port, const struct dest *me, struct dest *peer)
{
	char line[160], gid[33];
	int fd = -1;
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	char svc[16];
	snprintf(svc, sizeof svc, "%d", port);
	if (host) {
		if (getaddrinfo(host, svc, &hints, &res))
			die("getaddrinfo");
		for (int i = 0; i < WAIT_S * 10; i++) {
			fd = socket(res->ai_family, SOCK_STREAM, 0);
			if (connect(fd, res->ai_addr, res->ai_addrlen) == 0)
				break;
			close(fd);
			fd = -1;
			usleep(100000);
		}
		freeaddrinfo(res);
		if (fd < 0)
			die("connect");
	} else {
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1))
			die("listen");
		fd = accept(l, NULL, NULL);
		close(l);
		if (fd < 0)
			die("accept");
	}
	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", me->gid.raw[i]);
	int n = snprintf(line, sizeof line, "%06x %06x %s %016" PRIx64 " %08x %08x\n", me->qpn,
			 me->psn, gid, me->addr, me->rkey, me->len);
	if (write(fd, line, n) != n)
		die("write");
	FILE *f = fdopen(dup(fd), "r");
	if (!f || !fgets(line, sizeof line, f))
		die("read the peer's line");
	fclose(f);
	if (sscanf(line, "%x %x %32s %" SCNx64 " %x %x", &peer->qpn, &peer->psn, gid, &peer->addr,
		   &peer->rkey, &peer->len) != 6) {
		fprintf(stderr, "wire_peer: bad line %s", line);
		exit(2);
	}
	for (int i = 0; i < 16; i++)
		sscanf(gid + 2 * i, "%2hhx", &peer->gid.raw[i]);
	return fd;
}

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr, *local_mr;
	uint8_t *region, *local;
};

static struct ibv_wc wait_one(struct ctx *c)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + WAIT_S;
	for (;;) {
		int n = ibv_poll_cq(c->cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			return wc;
		if (time(NULL) > end) {
			fprintf(stderr, "wire_peer: no completion within %d s\n", WAIT_S);
			exit(2);
		}
	}
}

static void expect_ok(struct ctx *c, uint64_t wr_id, const char *what)
{
	struct ibv_wc wc = wait_one(c);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id) {
		fprintf(stderr, "wire_peer: %s: wr_id %" PRIu64 " status %s\n", what, wc.wr_id,
			ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static void post(struct ctx *c, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;
	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(c->qp, wr, &bad))
		die(what);
}

static void rdma(struct ctx *c, enum ibv_wr_opcode op, uint64_t loff, uint32_t len,
		 const struct dest *p, uint64_t roff, uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = {(uintptr_t)(c->local + loff), len, c->local_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op};
	wr.wr.rdma.remote_addr = p->addr + roff;
	wr.wr.rdma.rkey = rkey;
	post(c, &wr, "post rdma");
}

static uint64_t atomic(struct ctx *c, enum ibv_wr_opcode op, uint64_t cmp_add, uint64_t swap,
		       const struct dest *p)
{
	uint64_t *res = (uint64_t *)(c->local + DATA_LEN + 8);
	struct ibv_sge sge = {(uintptr_t)res, 8, c->local_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 900, .sg_list = &sge, .num_sge = 1, .opcode = op};
	wr.wr.atomic.remote_addr = p->addr + ATOMIC_OFF;
	wr.wr.atomic.rkey = p->rkey;
	wr.wr.atomic.compare_add = cmp_add;
	wr.wr.atomic.swap = swap;
	post(c, &wr, "post atomic");
	expect_ok(c, 900, "atomic");
	return *res;
}

static int initiator(struct ctx *c, const struct dest *p, uint32_t seed, int bad_rkey)
{
	if (bad_rkey) {
		rdma(c, IBV_WR_RDMA_WRITE, 0, 64, p, 0, p->rkey ^ 0x5a5a00, 1);
		struct ibv_wc wc = wait_one(c);
		printf("wire_peer: WRITE with a wrong rkey: %s\n", ibv_wc_status_str(wc.status));
		return wc.status == IBV_WC_REM_ACCESS_ERR ? 0 : 1;
	}
	for (uint64_t i = 0; i < DATA_LEN; i++)
		c->local[i] = pattern(seed, i);
	uint64_t off = 0;
	for (unsigned k = 0; k < NPIECES; k++) {
		uint32_t len = piece_len(k, off);
		rdma(c, IBV_WR_RDMA_WRITE, off, len, p, off, p->rkey, 10 + k);
		expect_ok(c, 10 + k, "write");
		off += len;
	}
	memset(c->local, 0, DATA_LEN);
	off = 0;
	for (unsigned k = 0; k < NPIECES; k++) {
		uint32_t len = piece_len(k, off);
		rdma(c, IBV_WR_RDMA_READ, off, len, p, off, p->rkey, 100 + k);
		expect_ok(c, 100 + k, "read");
		for (uint64_t i = off; i < off + len; i++)
			if (c->local[i] != pattern(seed, i)) {
				fprintf(stderr, "wire_peer: READ byte %" PRIu64 " is %u\n", i, c->local[i]);
				return 1;
			}
		off += len;
	}
	for (unsigned k = 0; k < NSENDS; k++) {
		for (uint32_t i = 0; i < SENDS[k]; i++)
			c->local[i] = pattern(seed + 1 + k, i);
		rdma(c, IBV_WR_SEND, 0, SENDS[k], p, 0, 0, 200 + k);
		expect_ok(c, 200 + k, "send");
	}
	for (uint64_t i = IMM_WRITE_OFF; i < IMM_WRITE_OFF + IMM_WRITE_LEN; i++)
		c->local[i] = pattern(seed, i);
	{
		struct ibv_sge sge = {(uintptr_t)(c->local + IMM_WRITE_OFF), IMM_WRITE_LEN,
				      c->local_mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 300, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM};
		wr.imm_data = htonl(IMM_VALUE);
		wr.wr.rdma.remote_addr = p->addr + IMM_WRITE_OFF;
		wr.wr.rdma.rkey = p->rkey;
		post(c, &wr, "post write with immediate");
		expect_ok(c, 300, "write with immediate");
	}
	uint64_t a = atomic(c, IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, p);
	uint64_t b = atomic(c, IBV_WR_ATOMIC_CMP_AND_SWP, ATOMIC_INIT + 5, 0xdeadbeef, p);
	uint64_t d = atomic(c, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, p);
	if (a != ATOMIC_INIT || b != ATOMIC_INIT + 5 || d != 0xdeadbeef) {
		fprintf(stderr, "wire_peer: atomics returned %" PRIx64 " %" PRIx64 " %" PRIx64 "\n",
			a, b, d);
		return 1;
	}
	printf("wire_peer: initiator plan done: %u writes, %u reads, %u sends, 3 atomics\n",
	       (unsigned)NPIECES, (unsigned)NPIECES, (unsigned)NSENDS);
	return 0;
}

/* The target's checks once the initiator says "done"; NULL when everything is as planned. */
static const char *target_check(struct ctx *c, uint32_t seed, char *why, size_t n)
{
	for (unsigned k = 0; k <= NSENDS; k++) {
		struct ibv_wc wc = wait_one(c);
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 500 + k) {
			snprintf(why, n, "receive %u: wr_id %" PRIu64 " %s", k, wc.wr_id,
				 ibv_wc_status_str(wc.status));
			return why;
		}
		if (k == NSENDS) {
			if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM_VALUE ||
			    wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
				snprintf(why, n, "write with immediate: opcode %d imm %08x", wc.opcode,
					 ntohl(wc.imm_data));
				return why;
			}
			break;
		}
		if (wc.byte_len != SENDS[k]) {
			snprintf(why, n, "receive %u: %u bytes", k, wc.byte_len);
			return why;
		}
		uint8_t *slot = c->local + (uint64_t)k * RECV_SLOT;
		for (uint32_t i = 0; i < SENDS[k]; i++)
			if (slot[i] != pattern(seed + 1 + k, i)) {
				snprintf(why, n, "receive %u: byte %u is %u", k, i, slot[i]);
				return why;
			}
	}
	for (uint64_t i = 0; i < DATA_LEN; i++)
		if (c->region[i] != pattern(seed, i)) {
			snprintf(why, n, "region byte %" PRIu64 " is %u", i, c->region[i]);
			return why;
		}
	uint64_t v;
	memcpy(&v, c->region + ATOMIC_OFF, 8);
	if (v != 0xdeadbef0) {
		snprintf(why, n, "atomic word is %" PRIx64, v);
		return why;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *role = NULL;
	int gidx = -1, port = 18600, bad_rkey = 0;
	uint32_t seed = 1;
	static const struct option opts[] = {{"bad-rkey", 0, NULL, 'b'}, {}};
	for (int o; (o = getopt_long(argc, argv, "d:g:r:p:s:", opts, NULL)) != -1;) {
		switch (o) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'r': role = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 's': seed = strtoul(optarg, NULL, 0); break;
		case 'b': bad_rkey = 1; break;
		default: return 2;
		}
	}
	const char *host = optind < argc ? argv[optind] : NULL;
	if (!devname || gidx < 0 || !role || (strcmp(role, "target") && strcmp(role, "initiator"))) {
		fprintf(stderr, "usage: wire_peer -d DEV -g GIDX -r target|initiator [-p PORT] "
				"[-s SEED] [--bad-rkey] [HOST]\n");
		return 2;
	}
	int is_target = !strcmp(role, "target");

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ctx c = {0};
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			c.dev = ibv_open_device(list[i]);
	if (!c.dev)
		die("open the device");
	c.pd = ibv_alloc_pd(c.dev);
	c.cq = ibv_create_cq(c.dev, 64, NULL, NULL, 0);
	c.region = aligned_alloc(4096, REGION_LEN);
	c.local = aligned_alloc(4096, REGION_LEN);
	if (!c.pd || !c.cq || !c.region || !c.local)
		die("allocate");
	memset(c.region, 0, REGION_LEN);
	memset(c.local, 0, REGION_LEN);
	uint64_t init = ATOMIC_INIT;
	memcpy(c.region + ATOMIC_OFF, &init, 8);
	c.mr = ibv_reg_mr(c.pd, c.region, REGION_LEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC);
	c.local_mr = ibv_reg_mr(c.pd, c.local, REGION_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!c.mr || !c.local_mr)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr qia = {.send_cq = c.cq, .recv_cq = c.cq, .qp_type = IBV_QPT_RC,
				       .cap = {.max_send_wr = 16, .max_recv_wr = 16,
					       .max_send_sge = 1, .max_recv_sge = 1}};
	c.qp = ibv_create_qp(c.pd, &qia);
	if (!c.qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						   IBV_ACCESS_REMOTE_ATOMIC};
	if (ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS))
		die("INIT");
	if (is_target)
		for (unsigned k = 0; k <= NSENDS; k++) {
			struct ibv_sge sge = {(uintptr_t)(c.local + (uint64_t)k * RECV_SLOT), RECV_SLOT,
					      c.local_mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = 500 + k, .sg_list = &sge, .num_sge = 1}, *bad;
			if (ibv_post_recv(c.qp, &wr, &bad))
				die("ibv_post_recv");
		}

	struct dest me = {.qpn = c.qp->qp_num, .addr = (uintptr_t)c.region, .rkey = c.mr->rkey,
			  .len = REGION_LEN}, peer;
	srand48(getpid() ^ time(NULL));
	me.psn = lrand48() & 0xffffff;
	if (ibv_query_gid(c.dev, 1, gidx, &me.gid))
		die("ibv_query_gid");
	int fd = tcp_exchange(host, port, &me, &peer);

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					    IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me.psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
	printf("wire_peer: %s, QPN %06x PSN %06x; peer QPN %06x PSN %06x\n", role, me.qpn, me.psn,
	       peer.qpn, peer.psn);

	char line[256];
	int rc;
	if (!is_target) {
		rc = initiator(&c, &peer, seed, bad_rkey);
		const char *say = rc ? "fail\n" : bad_rkey ? "badkey\n" : "done\n";
		if (write(fd, say, strlen(say)) != (ssize_t)strlen(say))
			die("write");
		FILE *f = fdopen(fd, "r");
		if (!f || !fgets(line, sizeof line, f))
			die("read the verdict");
		printf("wire_peer: target says %s", line);
		rc |= strncmp(line, "ok", 2) != 0;
	} else {
		FILE *f = fdopen(dup(fd), "r");
		if (!f || !fgets(line, sizeof line, f))
			die("read done");
		fclose(f);
		if (!strncmp(line, "badkey", 6)) {
			/* A WRITE under a wrong rkey must have left the region as it was. */
			uint64_t i = 0;
			while (i < DATA_LEN && !c.region[i])
				i++;
			int n = i == DATA_LEN ? snprintf(line, sizeof line, "ok\n")
					      : snprintf(line, sizeof line, "bad byte %" PRIu64 "\n", i);
			if (write(fd, line, n) != n)
				die("write");
			printf("wire_peer: after the wrong rkey: %s", line);
			rc = i != DATA_LEN;
		} else if (!strncmp(line, "bye", 3)) {
			/* The initiator ran its own load (`cargo xtask demo --backend wire`), checked
			 * by READing back: nothing of the plan to check here. */
			if (write(fd, "ok\n", 3) != 3)
				die("write");
			printf("wire_peer: the initiator ran its own load\n");
			rc = 0;
		} else if (strncmp(line, "done", 4)) {
			printf("wire_peer: initiator says %s", line);
			rc = 1;
		} else {
			char why[200];
			const char *bad = target_check(&c, seed, why, sizeof why);
			int n = bad ? snprintf(line, sizeof line, "bad %s\n", bad)
				    : snprintf(line, sizeof line, "ok\n");
			if (write(fd, line, n) != n)
				die("write");
			printf("wire_peer: target check: %s", line);
			rc = bad != NULL;
		}
	}
	close(fd);
	return rc;
}
