/*
 * The C interop peer: librdmacm used the ordinary way, with its synchronous endpoint API and
 * the rdma_verbs.h helpers, against which the Rust backend is tested.
 *
 *  - rxe_peer_target: listens, registers a buffer with rdma_reg_write, hands its address and
 *    rkey to the writer as accept private data, and waits (rdma_get_recv_comp) for the RDMA
 *    WRITE WITH IMMEDIATE that ends the writer's data; then copies the buffer out.
 *  - rxe_peer_writer: connects, reads the target's address and rkey from the accept private
 *    data, writes its bytes with one rdma_post_writev of two SGEs over an rdma_reg_msgs
 *    buffer, waits for the completion, and tells the target with an inline rdma_post_send.
 *
 *  - rxe_peer_pingpong: one end of a write ping-pong (the control of `rxe_bench lat --impl c`):
 *    each end registers a 2*size buffer with rdma_reg_write and swaps its address and rkey with
 *    the other in the connection's private data; per round one end writes `size` bytes from the
 *    second half of its buffer into the first half of the other's with rdma_post_write, the
 *    last byte carrying the round's tag, and waits for the send completion, while the other
 *    polls that byte and answers the same way. The active end times each round trip with the
 *    time-stamp counter, as perftest does.
 *  - rxe_peer_writes: one end of a stream of writes (the control of `rxe_bench bw --impl c`): the
 *    active end keeps up to `depth` rdma_post_writes of `size` bytes outstanding, signalling
 *    every `signal`-th and the last, times the run from the first post to the last completion,
 *    then sends a 4-byte token; the passive end is the target and waits for that token.
 *
 * All return 0 or a negative errno.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

/* Private data both sides exchange: where to write (host byte order, same host ABI). */
struct rxe_peer_target_info {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

static int neg_errno(void)
{
	return errno ? -errno : -EIO;
}

static int wc_result(int n, const struct ibv_wc *wc)
{
	if (n < 0)
		return neg_errno();
	if (n == 0)
		return -EIO;
	if (wc->status != IBV_WC_SUCCESS)
		return -1000 - (int)wc->status;
	return 0;
}

int rxe_peer_target(const char *ip, const char *port, uint8_t *out, uint32_t len,
		    uint32_t *imm, void (*listening)(void *), void *ctx)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct rdma_conn_param param;
	struct rxe_peer_target_info info;
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;
	uint8_t *buf = NULL;
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(ip, port, &hints, &res))
		return neg_errno();
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	ret = rdma_create_ep(&listen_id, res, NULL, &attr);
	rdma_freeaddrinfo(res);
	if (ret)
		return neg_errno();
	if (rdma_listen(listen_id, 1)) {
		ret = neg_errno();
		goto out;
	}
	listening(ctx);
	if (rdma_get_request(listen_id, &id)) {
		ret = neg_errno();
		goto out;
	}
	buf = calloc(1, len ? len : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	mr = rdma_reg_write(id, buf, len);
	if (!mr) {
		ret = neg_errno();
		goto out;
	}
	/* The immediate needs a receive; its payload is empty. */
	if (rdma_post_recvv(id, NULL, NULL, 0)) {
		ret = neg_errno();
		goto out;
	}
	info.addr = (uint64_t)(uintptr_t)buf;
	info.rkey = mr->rkey;
	info.len = len;
	memset(&param, 0, sizeof(param));
	param.private_data = &info;
	param.private_data_len = sizeof(info);
	param.responder_resources = param.initiator_depth = 1;
	param.rnr_retry_count = 7;
	if (rdma_accept(id, &param)) {
		ret = neg_errno();
		goto out;
	}
	ret = wc_result(rdma_get_recv_comp(id, &wc), &wc);
	if (ret)
		goto out;
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
		ret = -EPROTO;
		goto out;
	}
	*imm = be32toh(wc.imm_data);
	memcpy(out, buf, len);
out:
	if (mr)
		rdma_dereg_mr(mr);
	free(buf);
	if (id)
		rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return ret;
}

int rxe_peer_writer(const char *ip, const char *port, const uint8_t *data, uint32_t len,
		    uint32_t token)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *id = NULL;
	struct rdma_conn_param param;
	struct rxe_peer_target_info info;
	struct ibv_mr *mr = NULL;
	struct ibv_sge sge[2];
	struct ibv_wc wc;
	uint8_t *buf = NULL;
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(ip, port, &hints, &res))
		return neg_errno();
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = 2;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = sizeof(token);
	attr.sq_sig_all = 1;
	ret = rdma_create_ep(&id, res, NULL, &attr);
	rdma_freeaddrinfo(res);
	if (ret)
		return neg_errno();
	buf = malloc(len ? len : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(buf, data, len);
	mr = rdma_reg_msgs(id, buf, len);
	if (!mr) {
		ret = neg_errno();
		goto out;
	}
	memset(&param, 0, sizeof(param));
	param.responder_resources = param.initiator_depth = 1;
	param.retry_count = param.rnr_retry_count = 7;
	if (rdma_connect(id, &param)) {
		ret = neg_errno();
		goto out;
	}
	if (!id->event || id->event->param.conn.private_data_len < sizeof(info)) {
		ret = -EPROTO;
		goto out;
	}
	memcpy(&info, id->event->param.conn.private_data, sizeof(info));
	if (info.len < len) {
		ret = -EMSGSIZE;
		goto out;
	}
	sge[0].addr = (uint64_t)(uintptr_t)buf;
	sge[0].length = len / 2;
	sge[0].lkey = mr->lkey;
	sge[1].addr = (uint64_t)(uintptr_t)buf + len / 2;
	sge[1].length = len - len / 2;
	sge[1].lkey = mr->lkey;
	if (rdma_post_writev(id, NULL, sge, 2, IBV_SEND_SIGNALED, info.addr, info.rkey)) {
		ret = neg_errno();
		goto out;
	}
	ret = wc_result(rdma_get_send_comp(id, &wc), &wc);
	if (ret)
		goto out;
	if (rdma_post_send(id, NULL, &token, sizeof(token), NULL,
			   IBV_SEND_INLINE | IBV_SEND_SIGNALED)) {
		ret = neg_errno();
		goto out;
	}
	ret = wc_result(rdma_get_send_comp(id, &wc), &wc);
out:
	if (mr)
		rdma_dereg_mr(mr);
	free(buf);
	rdma_destroy_ep(id);
	return ret;
}

/* The tick counter rounds are timed with: the TSC on x86, nanoseconds elsewhere. */
static uint64_t pp_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc();
#else
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
}

static uint64_t pp_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Polls between two reads of the clock, which bounds every wait to PP_WAIT_NS: the clock is a
 * system call in some guests, so it is read rarely and never on entry. */
#define PP_POLLS_PER_CLOCK (1u << 20)
#define PP_WAIT_NS 10000000000ull

static int pp_expired(uint32_t polls, uint64_t *deadline)
{
	uint64_t now;

	if (polls % PP_POLLS_PER_CLOCK)
		return 0;
	now = pp_ns();
	if (!*deadline)
		*deadline = now + PP_WAIT_NS;
	return now > *deadline;
}

static int pp_await_byte(volatile const uint8_t *p, uint8_t tag)
{
	uint64_t deadline = 0;
	uint32_t polls = 0;

	while (*p != tag)
		if (pp_expired(++polls, &deadline))
			return -ETIMEDOUT;
	return 0;
}

static int pp_await_send(struct rdma_cm_id *id)
{
	uint64_t deadline = 0;
	uint32_t polls = 0;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(id->send_cq, 1, &wc)) == 0)
		if (pp_expired(++polls, &deadline))
			return -ETIMEDOUT;
	return wc_result(n, &wc);
}

/* One connected end of the controls: its ids, its registered 2*len-byte (ping-pong) or len-byte
 * (writes) buffer, and where the other end's buffer is. */
struct pp_end {
	struct rdma_cm_id *listen_id, *id;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct rxe_peer_target_info peer;
};

static void pp_close(struct pp_end *e)
{
	if (e->mr)
		rdma_dereg_mr(e->mr);
	free(e->buf);
	if (e->id)
		rdma_destroy_ep(e->id);
	if (e->listen_id)
		rdma_destroy_ep(e->listen_id);
}

/* Connect (active) or listen and accept one connection (passive), with a zeroed, page-aligned
 * buffer of `buflen` bytes registered with rdma_reg_write; the two ends swap its address, its
 * rkey and `len` in the private data. The passive end posts one receive for `token_len` bytes
 * at the start of its buffer before it accepts (0: none). */
static int pp_connect(const char *ip, const char *port, int active, uint32_t send_wr,
		      size_t buflen, uint32_t len, uint32_t token_len, struct pp_end *e,
		      void (*listening)(void *), void *ctx)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;
	struct rxe_peer_target_info mine;
	int ret;

	memset(e, 0, sizeof(*e));
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = active ? 0 : RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(ip, port, &hints, &res))
		return neg_errno();
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = send_wr;
	attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = sizeof(uint32_t);
	ret = rdma_create_ep(active ? &e->id : &e->listen_id, res, NULL, &attr);
	rdma_freeaddrinfo(res);
	if (ret)
		return neg_errno();
	if (!active) {
		if (rdma_listen(e->listen_id, 1))
			return neg_errno();
		listening(ctx);
		if (rdma_get_request(e->listen_id, &e->id))
			return neg_errno();
		/* The request's private data is the active end's buffer. */
		if (!e->id->event || e->id->event->param.conn.private_data_len < sizeof(e->peer))
			return -EPROTO;
		memcpy(&e->peer, e->id->event->param.conn.private_data, sizeof(e->peer));
	}
	if (posix_memalign((void **)&e->buf, 4096, buflen ? buflen : 1))
		return -ENOMEM;
	memset(e->buf, 0, buflen);
	e->mr = rdma_reg_write(e->id, e->buf, buflen);
	if (!e->mr)
		return neg_errno();
	if (!active && token_len && rdma_post_recv(e->id, NULL, e->buf, token_len, e->mr))
		return neg_errno();
	mine.addr = (uint64_t)(uintptr_t)e->buf;
	mine.rkey = e->mr->rkey;
	mine.len = len;
	memset(&param, 0, sizeof(param));
	param.private_data = &mine;
	param.private_data_len = sizeof(mine);
	param.responder_resources = param.initiator_depth = 1;
	param.retry_count = param.rnr_retry_count = 7;
	if (active ? rdma_connect(e->id, &param) : rdma_accept(e->id, &param))
		return neg_errno();
	if (active) {
		/* The accept's private data is the passive end's buffer. */
		if (!e->id->event || e->id->event->param.conn.private_data_len < sizeof(e->peer))
			return -EPROTO;
		memcpy(&e->peer, e->id->event->param.conn.private_data, sizeof(e->peer));
	}
	return e->peer.len < len ? -EMSGSIZE : 0;
}

int rxe_peer_pingpong(const char *ip, const char *port, int active, uint32_t size, uint32_t iters,
		      uint64_t *ticks, uint64_t *run_ns, uint64_t *run_ticks,
		      void (*listening)(void *), void *ctx)
{
	struct pp_end e;
	uint64_t ns0, tick0;
	uint32_t r;
	int ret;

	if (!size)
		return -EINVAL;
	ret = pp_connect(ip, port, active, 8, 2 * (size_t)size, size, 0, &e, listening, ctx);
	if (ret)
		goto out;
	ns0 = pp_ns();
	tick0 = pp_ticks();
	for (r = 1; r <= iters; r++) {
		uint8_t tag = (uint8_t)(r % 251 + 1);
		uint64_t t0 = 0;

		if (!active && (ret = pp_await_byte(e.buf + size - 1, tag)))
			goto out;
		if (active)
			t0 = pp_ticks();
		e.buf[2 * (size_t)size - 1] = tag;
		if (rdma_post_write(e.id, NULL, e.buf + size, size, e.mr, IBV_SEND_SIGNALED,
				    e.peer.addr, e.peer.rkey)) {
			ret = neg_errno();
			goto out;
		}
		if (active) {
			if ((ret = pp_await_byte(e.buf + size - 1, tag)))
				goto out;
			ticks[r - 1] = pp_ticks() - t0;
		}
		if ((ret = pp_await_send(e.id)))
			goto out;
	}
	*run_ns = pp_ns() - ns0;
	*run_ticks = pp_ticks() - tick0;
	ret = 0;
out:
	pp_close(&e);
	return ret;
}

int rxe_peer_writes(const char *ip, const char *port, int active, uint32_t size, uint32_t iters,
		    uint32_t depth, uint32_t signal, uint64_t *run_ns, void (*listening)(void *),
		    void *ctx)
{
	struct ibv_wc wc[16];
	struct pp_end e;
	uint64_t deadline = 0, posted = 0, retired = 0, ns0;
	uint32_t polls = 0, token = 1;
	int i, n, ret;

	if (!size || !depth || !signal)
		return -EINVAL;
	ret = pp_connect(ip, port, active, depth, size, size, sizeof(token), &e, listening, ctx);
	if (ret)
		goto out;
	if (!active) {
		/* The target: wait for the writer's end-of-run token. */
		while ((n = ibv_poll_cq(e.id->recv_cq, 1, wc)) == 0)
			if (pp_expired(++polls, &deadline)) {
				ret = -ETIMEDOUT;
				goto out;
			}
		ret = wc_result(n, wc);
		goto out;
	}
	ns0 = pp_ns();
	while (posted < iters || retired < posted) {
		while (posted < iters && posted - retired < depth) {
			posted++;
			if (rdma_post_write(e.id, (void *)(uintptr_t)posted, e.buf, size, e.mr,
					    posted % signal == 0 || posted == iters ?
						    IBV_SEND_SIGNALED : 0,
					    e.peer.addr, e.peer.rkey)) {
				ret = neg_errno();
				goto out;
			}
		}
		n = ibv_poll_cq(e.id->send_cq, 16, wc);
		if (n < 0) {
			ret = neg_errno();
			goto out;
		}
		/* A completion retires its request and every unsignalled one before it. */
		for (i = 0; i < n; i++) {
			if ((ret = wc_result(1, &wc[i])))
				goto out;
			retired = wc[i].wr_id;
		}
		if (!n && pp_expired(++polls, &deadline)) {
			ret = -ETIMEDOUT;
			goto out;
		}
	}
	*run_ns = pp_ns() - ns0;
	if (rdma_post_send(e.id, NULL, &token, sizeof(token), NULL,
			   IBV_SEND_INLINE | IBV_SEND_SIGNALED)) {
		ret = neg_errno();
		goto out;
	}
	ret = pp_await_send(e.id);
out:
	pp_close(&e);
	return ret;
}
