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
 * Both return 0 or a negative errno.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
