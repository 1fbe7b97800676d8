/*
 * Real symbols for the rdma-core calls that verbs.h only provides as static inline functions
 * (or the provider entry points those functions call),
 * plus field accessors for the two librdmacm structures the Rust side keeps opaque, and the
 * layout facts the Rust tests check their declarations against.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* The provider's entry points that ibv_post_send and ibv_poll_cq call through the context's ops
 * table. The provider sets the table once, when the context is opened, so the Rust side reads
 * the two pointers when it creates a queue pair and then calls them directly: the same single
 * indirect call as rdma-core's inline functions, without a call into this file first. */
typedef int (*rxe_shim_post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
typedef int (*rxe_shim_poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);

rxe_shim_post_send_fn rxe_shim_post_send_entry(const struct ibv_qp *qp)
{
	return qp->context->ops.post_send;
}

rxe_shim_poll_cq_fn rxe_shim_poll_cq_entry(const struct ibv_cq *cq)
{
	return cq->context->ops.poll_cq;
}

int rxe_shim_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}

struct ibv_context *rxe_shim_id_verbs(const struct rdma_cm_id *id)
{
	return id->verbs;
}

struct ibv_pd *rxe_shim_id_pd(const struct rdma_cm_id *id)
{
	return id->pd;
}

struct ibv_qp *rxe_shim_id_qp(const struct rdma_cm_id *id)
{
	return id->qp;
}

/* Private data of the last connection event of a synchronous id (the request for the passive
 * side before rdma_accept, the established event for the active side after rdma_connect). */
const void *rxe_shim_id_private_data(const struct rdma_cm_id *id, uint8_t *len)
{
	if (!id->event) {
		*len = 0;
		return NULL;
	}
	*len = id->event->param.conn.private_data_len;
	return id->event->param.conn.private_data;
}

uint32_t rxe_shim_qp_num(const struct ibv_qp *qp)
{
	return qp->qp_num;
}

uint8_t rxe_shim_id_port(const struct rdma_cm_id *id)
{
	return id->port_num;
}

/* A UD queue pair through its three transitions, with the attributes the verbs require for
 * each (IBTA 11.2.5.3; rdma-core's ud_pingpong.c sets the same): INIT with P_Key index 0,
 * the port and the Q_Key; RTR; RTS with send PSN 0. Returns 0 or the errno. */
int rxe_shim_ud_ready(struct ibv_qp *qp, uint8_t port, uint32_t qkey)
{
	struct ibv_qp_attr attr;
	int rc;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = port;
	attr.qkey = qkey;
	rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (rc)
		return rc;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	if (rc)
		return rc;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = 0;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* An address handle for RoCE: always global (RoCE carries a GRH, or its IPv4 equivalent);
 * the kernel resolves the destination MAC from the GID. NULL with errno set on failure. */
struct ibv_ah *rxe_shim_create_ah(struct ibv_pd *pd, uint8_t port, const uint8_t *dgid,
				  uint8_t sgid_index, uint8_t hop_limit, uint8_t traffic_class,
				  uint32_t flow_label, uint8_t sl, uint8_t static_rate)
{
	struct ibv_ah_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.is_global = 1;
	attr.port_num = port;
	memcpy(attr.grh.dgid.raw, dgid, 16);
	attr.grh.sgid_index = sgid_index;
	attr.grh.hop_limit = hop_limit;
	attr.grh.traffic_class = traffic_class;
	attr.grh.flow_label = flow_label;
	attr.sl = sl;
	attr.static_rate = static_rate;
	return ibv_create_ah(pd, &attr);
}

#define SZ(t) { "sizeof " #t, sizeof(struct t) }
#define OFF(t, f) { #t "." #f, offsetof(struct t, f) }
#define VAL(v) { #v, (uint64_t)(v) }

/* The `wr` union's size, through a struct that holds only it (the union has no tag). */
struct ibv_send_wr_wr_probe {
	__typeof__(((struct ibv_send_wr *)0)->wr) wr;
};

static const struct {
	const char *name;
	uint64_t value;
} layout[] = {
	SZ(ibv_sge), OFF(ibv_sge, addr), OFF(ibv_sge, length), OFF(ibv_sge, lkey),
	SZ(ibv_send_wr), OFF(ibv_send_wr, wr_id), OFF(ibv_send_wr, next),
	OFF(ibv_send_wr, sg_list), OFF(ibv_send_wr, num_sge), OFF(ibv_send_wr, opcode),
	OFF(ibv_send_wr, send_flags), OFF(ibv_send_wr, imm_data),
	OFF(ibv_send_wr, wr), SZ(ibv_send_wr_wr_probe),
	OFF(ibv_send_wr, wr.rdma.remote_addr), OFF(ibv_send_wr, wr.rdma.rkey),
	OFF(ibv_send_wr, wr.atomic.remote_addr), OFF(ibv_send_wr, wr.atomic.compare_add),
	OFF(ibv_send_wr, wr.atomic.swap), OFF(ibv_send_wr, wr.atomic.rkey),
	OFF(ibv_send_wr, wr.ud.ah), OFF(ibv_send_wr, wr.ud.remote_qpn),
	OFF(ibv_send_wr, wr.ud.remote_qkey),
	OFF(ibv_send_wr, qp_type), OFF(ibv_send_wr, bind_mw),
	SZ(ibv_recv_wr), OFF(ibv_recv_wr, wr_id), OFF(ibv_recv_wr, next),
	OFF(ibv_recv_wr, sg_list), OFF(ibv_recv_wr, num_sge),
	SZ(ibv_wc), OFF(ibv_wc, wr_id), OFF(ibv_wc, status), OFF(ibv_wc, opcode),
	OFF(ibv_wc, vendor_err), OFF(ibv_wc, byte_len), OFF(ibv_wc, imm_data),
	OFF(ibv_wc, qp_num), OFF(ibv_wc, src_qp), OFF(ibv_wc, wc_flags),
	SZ(ibv_qp_cap), OFF(ibv_qp_cap, max_send_wr), OFF(ibv_qp_cap, max_recv_wr),
	OFF(ibv_qp_cap, max_send_sge), OFF(ibv_qp_cap, max_recv_sge),
	OFF(ibv_qp_cap, max_inline_data),
	SZ(ibv_qp_init_attr), OFF(ibv_qp_init_attr, qp_context), OFF(ibv_qp_init_attr, send_cq),
	OFF(ibv_qp_init_attr, recv_cq), OFF(ibv_qp_init_attr, srq), OFF(ibv_qp_init_attr, cap),
	OFF(ibv_qp_init_attr, qp_type), OFF(ibv_qp_init_attr, sq_sig_all),
	SZ(ibv_mr), OFF(ibv_mr, addr), OFF(ibv_mr, length), OFF(ibv_mr, lkey), OFF(ibv_mr, rkey),
	SZ(rdma_addrinfo), OFF(rdma_addrinfo, ai_flags), OFF(rdma_addrinfo, ai_port_space),
	OFF(rdma_addrinfo, ai_next),
	SZ(rdma_conn_param), OFF(rdma_conn_param, private_data),
	OFF(rdma_conn_param, private_data_len), OFF(rdma_conn_param, responder_resources),
	OFF(rdma_conn_param, initiator_depth), OFF(rdma_conn_param, flow_control),
	OFF(rdma_conn_param, retry_count), OFF(rdma_conn_param, rnr_retry_count),
	OFF(rdma_conn_param, srq), OFF(rdma_conn_param, qp_num),
	VAL(IBV_WR_RDMA_WRITE), VAL(IBV_WR_RDMA_WRITE_WITH_IMM), VAL(IBV_WR_SEND),
	VAL(IBV_WR_SEND_WITH_IMM), VAL(IBV_WR_RDMA_READ), VAL(IBV_WR_ATOMIC_CMP_AND_SWP),
	VAL(IBV_WR_ATOMIC_FETCH_AND_ADD), VAL(IBV_WC_GRH), VAL(IBV_QPT_UD),
	VAL(IBV_ACCESS_REMOTE_ATOMIC), VAL(IBV_WC_RDMA_READ), VAL(IBV_WC_COMP_SWAP),
	VAL(IBV_WC_FETCH_ADD), VAL(IBV_WC_SEND), VAL(IBV_WC_LOC_LEN_ERR), VAL(IBV_WC_LOC_QP_OP_ERR),
	VAL(IBV_WC_REM_INV_REQ_ERR), VAL(IBV_WC_REM_OP_ERR), VAL(IBV_WC_RNR_RETRY_EXC_ERR),
	VAL(IBV_SEND_FENCE), VAL(IBV_SEND_SIGNALED), VAL(IBV_SEND_SOLICITED), VAL(IBV_SEND_INLINE),
	VAL(IBV_WC_SUCCESS), VAL(IBV_WC_LOC_PROT_ERR), VAL(IBV_WC_WR_FLUSH_ERR),
	VAL(IBV_WC_REM_ACCESS_ERR), VAL(IBV_WC_RETRY_EXC_ERR), VAL(IBV_WC_GENERAL_ERR),
	VAL(IBV_WC_RDMA_WRITE), VAL(IBV_WC_RECV), VAL(IBV_WC_RECV_RDMA_WITH_IMM),
	VAL(IBV_WC_WITH_IMM),
	VAL(IBV_ACCESS_LOCAL_WRITE), VAL(IBV_ACCESS_REMOTE_WRITE), VAL(IBV_ACCESS_REMOTE_READ),
	VAL(IBV_QPT_RC), VAL(RDMA_PS_TCP), VAL(RAI_PASSIVE),
};

/* The value recorded under `name`, or UINT64_MAX when the name is unknown. */
uint64_t rxe_shim_layout(const char *name)
{
	for (size_t i = 0; i < sizeof(layout) / sizeof(layout[0]); i++)
		if (!strcmp(layout[i].name, name))
			return layout[i].value;
	return UINT64_MAX;
}
