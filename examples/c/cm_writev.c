/*
 * cm_writev: the project's rdma_cm peer for the `wire` tier: a client and a server that connect
 * with librdmacm (RDMA_PS_TCP), the server advertising its region in the REP's private data,
 * and the client gathering a pattern into it with rdma_post_writev, several buffers per write.
 * Each side checks what is its to check:
 *
 *   server  -s ADDR: listens on ADDR:PORT, registers REGION_LEN bytes with remote write,
 *           accepts with {be64 addr, be32 rkey, be32 len} as private data, posts a receive,
 *           and on the client's "done" message compares the region with the pattern, answers
 *           "ok" or "bad" and the first bad offset, and waits for the client's disconnect;
 *   client  -c ADDR: connects (retrying while nobody listens yet), reads the advertisement
 *           from the ESTABLISHED event, and tiles the region with WRITEs whose lengths cycle
 *           through WRITE_LENS, each an SGL of up to three elements taken alternately from two
 *           registered buffers that both hold the region's image; then SENDs "done", expects
 *           "ok" and disconnects.
 *
 * The plan (region length, write lengths, pattern, messages) is fixed and the same in the Rust
 * side of the tier (drivers/mlx5/tests/wire_cm.rs). Exit status 0 when every check passed.
 *
 * Seeds: tshark's InfiniBand dissector reads an RC payload of one or two bytes, followed by
 * zero pad, as an Ethertype and the rest as that protocol (a malformed packet to the tier). The
 * plan's 1025-byte WRITEs end in 1-byte packets, so the seeds the tier uses (3, the default,
 * 13 and 14) are ones whose bytes there name no Ethertype.
 *
 * Usage: cm_writev -s ADDR | -c ADDR [-p PORT] [-S SEED]
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define REGION_LEN (256u * 1024)
#define MSG_LEN 16
#define CONNECT_TRIES 100

/* Lengths of the WRITEs, cycled until the region is covered (the last one is cut short). */
static const uint32_t WRITE_LENS[] = {1, 2, 3, 64, 100, 1000, 1024, 1025, 4096, 5000, 16384};
#define NLENS (sizeof WRITE_LENS / sizeof WRITE_LENS[0])

static uint8_t pattern(uint32_t seed, uint64_t i)
{
	return (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

static void die(const char *what)
{
	fprintf(stderr, "cm_writev: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct rdma_addrinfo *addrinfo(const char *addr, const char *port, int passive)
{
	struct rdma_addrinfo hints, *res;
	int ret;

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	ret = rdma_getaddrinfo(addr, port, &hints, &res);
	if (ret) {
		fprintf(stderr, "cm_writev: rdma_getaddrinfo %s:%s: %d\n", addr, port, ret);
		exit(2);
	}
	return res;
}

static void qp_attr(struct ibv_qp_init_attr *a)
{
	memset(a, 0, sizeof *a);
	a->cap.max_send_wr = 64;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 3;
	a->cap.max_recv_sge = 1;
	a->sq_sig_all = 1;
}

/* Wait for one completion of the send (or receive) queue; exit on an error status. */
static void complete(struct rdma_cm_id *id, int recv, struct ibv_wc *wc)
{
	int ret;

	do
		ret = recv ? rdma_get_recv_comp(id, wc) : rdma_get_send_comp(id, wc);
	while (ret == 0);
	if (ret < 0)
		die(recv ? "rdma_get_recv_comp" : "rdma_get_send_comp");
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "cm_writev: %s completion: %s\n", recv ? "receive" : "send",
			ibv_wc_status_str(wc->status));
		exit(1);
	}
}

/* Wait for the peer's disconnect (or our own's answer) on a synchronous ID's channel. */
static void await_disconnect(struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev;

	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	while (rdma_get_cm_event(id->channel, &ev) == 0) {
		enum rdma_cm_event_type t = ev->event;

		rdma_ack_cm_event(ev);
		if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_TIMEWAIT_EXIT)
			return;
		fprintf(stderr, "cm_writev: event %s while waiting to disconnect\n",
			rdma_event_str(t));
	}
	die("rdma_get_cm_event");
}

static int run_server(const char *addr, const char *port, uint32_t seed)
{
	struct rdma_addrinfo *res = addrinfo(addr, port, 1);
	struct rdma_cm_id *listen_id, *id;
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;
	uint8_t adv[16], done[MSG_LEN], verdict[MSG_LEN];
	struct ibv_mr *mr, *done_mr, *verdict_mr;
	struct ibv_wc wc;
	uint8_t *region;
	uint64_t bad = UINT64_MAX, bytes, i;
	uint32_t writes;

	qp_attr(&attr);
	if (rdma_create_ep(&listen_id, res, NULL, &attr))
		die("rdma_create_ep");
	if (rdma_listen(listen_id, 0))
		die("rdma_listen");
	printf("cm_writev: listening on %s:%s\n", addr, port);
	fflush(stdout);
	if (rdma_get_request(listen_id, &id))
		die("rdma_get_request");
	region = calloc(1, REGION_LEN);
	if (!region)
		die("calloc");
	mr = rdma_reg_write(id, region, REGION_LEN);
	done_mr = rdma_reg_msgs(id, done, sizeof done);
	verdict_mr = rdma_reg_msgs(id, verdict, sizeof verdict);
	if (!mr || !done_mr || !verdict_mr)
		die("rdma_reg");
	if (rdma_post_recv(id, NULL, done, sizeof done, done_mr))
		die("rdma_post_recv");
	*(uint64_t *)adv = htobe64((uintptr_t)region);
	*(uint32_t *)(adv + 8) = htobe32(mr->rkey);
	*(uint32_t *)(adv + 12) = htobe32(REGION_LEN);
	memset(&param, 0, sizeof param);
	param.private_data = adv;
	param.private_data_len = sizeof adv;
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.rnr_retry_count = 7;
	if (rdma_accept(id, &param))
		die("rdma_accept");
	complete(id, 1, &wc);
	if (wc.byte_len != MSG_LEN || memcmp(done, "done", 4)) {
		fprintf(stderr, "cm_writev: bad done message (%u bytes)\n", wc.byte_len);
		return 1;
	}
	writes = be32toh(*(uint32_t *)(done + 4));
	bytes = be64toh(*(uint64_t *)(done + 8));
	for (i = 0; i < REGION_LEN; i++)
		if (region[i] != pattern(seed, i)) {
			bad = i;
			break;
		}
	if (bytes != REGION_LEN && bad == UINT64_MAX)
		bad = bytes;
	memset(verdict, 0, sizeof verdict);
	memcpy(verdict, bad == UINT64_MAX ? "ok" : "bad", bad == UINT64_MAX ? 2 : 3);
	*(uint64_t *)(verdict + 8) = htobe64(bad);
	if (rdma_post_send(id, NULL, verdict, sizeof verdict, verdict_mr, 0))
		die("rdma_post_send");
	complete(id, 0, &wc);
	await_disconnect(id);
	rdma_disconnect(id);
	printf("cm_writev: server: %u writes, %" PRIu64 " bytes, %s\n", writes, bytes,
	       bad == UINT64_MAX ? "region ok" : "region bad");
	if (bad != UINT64_MAX)
		fprintf(stderr, "cm_writev: region byte %" PRIu64 " is wrong\n", bad);
	rdma_dereg_mr(verdict_mr);
	rdma_dereg_mr(done_mr);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	rdma_freeaddrinfo(res);
	free(region);
	return bad == UINT64_MAX ? 0 : 1;
}

/* Connect, retrying while the server is not listening yet (ECONNREFUSED). */
static struct rdma_cm_id *connect_retrying(const char *addr, const char *port)
{
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;
	int tries;

	for (tries = 0; tries < CONNECT_TRIES; tries++) {
		struct rdma_addrinfo *res = addrinfo(addr, port, 0);
		struct rdma_cm_id *id;

		qp_attr(&attr);
		if (rdma_create_ep(&id, res, NULL, &attr))
			die("rdma_create_ep");
		rdma_freeaddrinfo(res);
		memset(&param, 0, sizeof param);
		param.responder_resources = 1;
		param.initiator_depth = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		if (rdma_connect(id, &param) == 0)
			return id;
		if (errno != ECONNREFUSED)
			die("rdma_connect");
		rdma_destroy_ep(id);
		usleep(200 * 1000);
	}
	fprintf(stderr, "cm_writev: nobody listens on %s:%s\n", addr, port);
	exit(2);
}

static int run_client(const char *addr, const char *port, uint32_t seed)
{
	struct rdma_cm_id *id = connect_retrying(addr, port);
	struct ibv_mr *a_mr, *b_mr, *msg_mr, *verdict_mr;
	uint8_t *a, *b, msg[MSG_LEN], verdict[MSG_LEN];
	const uint8_t *adv;
	uint64_t raddr, off, i;
	uint32_t rkey, rlen, writes = 0;
	struct ibv_wc wc;

	if (!id->event || id->event->event != RDMA_CM_EVENT_ESTABLISHED ||
	    id->event->param.conn.private_data_len < 16) {
		fprintf(stderr, "cm_writev: no advertisement in the REP\n");
		return 1;
	}
	adv = id->event->param.conn.private_data;
	raddr = be64toh(*(const uint64_t *)adv);
	rkey = be32toh(*(const uint32_t *)(adv + 8));
	rlen = be32toh(*(const uint32_t *)(adv + 12));
	if (rlen != REGION_LEN) {
		fprintf(stderr, "cm_writev: advertised %u bytes, expected %u\n", rlen, REGION_LEN);
		return 1;
	}
	a = malloc(REGION_LEN);
	b = malloc(REGION_LEN);
	if (!a || !b)
		die("malloc");
	for (i = 0; i < REGION_LEN; i++)
		a[i] = b[i] = pattern(seed, i);
	a_mr = rdma_reg_msgs(id, a, REGION_LEN);
	b_mr = rdma_reg_msgs(id, b, REGION_LEN);
	msg_mr = rdma_reg_msgs(id, msg, sizeof msg);
	verdict_mr = rdma_reg_msgs(id, verdict, sizeof verdict);
	if (!a_mr || !b_mr || !msg_mr || !verdict_mr)
		die("rdma_reg_msgs");
	if (rdma_post_recv(id, NULL, verdict, sizeof verdict, verdict_mr))
		die("rdma_post_recv");
	for (off = 0; off < REGION_LEN; writes++) {
		uint32_t len = WRITE_LENS[writes % NLENS];
		struct ibv_sge sgl[3];
		int n, k;

		if (len > REGION_LEN - off)
			len = (uint32_t)(REGION_LEN - off);
		/* Up to three pieces, alternately from a and b: [len/3, len/3, the rest]. */
		n = len >= 3 ? 3 : 1;
		for (k = 0; k < n; k++) {
			uint32_t piece = n == 1 ? len : (k < 2 ? len / 3 : len - 2 * (len / 3));
			uint64_t at = off + (k == 0 ? 0 : (k == 1 ? len / 3 : 2 * (len / 3)));
			struct ibv_mr *m = k % 2 ? b_mr : a_mr;
			uint8_t *base = k % 2 ? b : a;

			sgl[k].addr = (uintptr_t)(base + at);
			sgl[k].length = piece;
			sgl[k].lkey = m->lkey;
		}
		if (rdma_post_writev(id, NULL, sgl, n, 0, raddr + off, rkey))
			die("rdma_post_writev");
		complete(id, 0, &wc);
		off += len;
	}
	memset(msg, 0, sizeof msg);
	memcpy(msg, "done", 4);
	*(uint32_t *)(msg + 4) = htobe32(writes);
	*(uint64_t *)(msg + 8) = htobe64(off);
	if (rdma_post_send(id, NULL, msg, sizeof msg, msg_mr, 0))
		die("rdma_post_send");
	complete(id, 0, &wc);
	complete(id, 1, &wc);
	printf("cm_writev: client: %u writes, %" PRIu64 " bytes, verdict %.3s\n", writes, off,
	       (const char *)verdict);
	rdma_disconnect(id);
	await_disconnect(id);
	rdma_dereg_mr(verdict_mr);
	rdma_dereg_mr(msg_mr);
	rdma_dereg_mr(b_mr);
	rdma_dereg_mr(a_mr);
	rdma_destroy_ep(id);
	free(a);
	free(b);
	return memcmp(verdict, "ok", 3) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *server = NULL, *client = NULL, *port = "7472";
	uint32_t seed = 3;
	int op;

	while ((op = getopt(argc, argv, "s:c:p:S:")) != -1) {
		switch (op) {
		case 's':
			server = optarg;
			break;
		case 'c':
			client = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 'S':
			seed = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr, "usage: %s -s ADDR | -c ADDR [-p PORT] [-S SEED]\n",
				argv[0]);
			return 2;
		}
	}
	if (!!server == !!client) {
		fprintf(stderr, "usage: %s -s ADDR | -c ADDR [-p PORT] [-S SEED]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	return server ? run_server(server, port, seed) : run_client(client, port, seed);
}
