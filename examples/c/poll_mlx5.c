/*
 * Reference reaping loop for `cargo xtask bench poll`, linked into the Rust benchmark.
 *
 * poll_cq follows rdma-core's providers/mlx5/cq.c (poll_cq, mlx5_poll_one,
 * mlx5_get_next_cqe, mlx5_parse_cqe) for a CQ serving one RC QP's send queue, 64-byte CQEs:
 *   1. the entry at cons_index is software's if its opcode is not MLX5_CQE_INVALID and its
 *      owner bit equals !!(cons_index & (cqe + 1)) (get_sw_cqe); ++cons_index;
 *   2. udma_from_device_barrier, then the entry is parsed: wc_flags = 0, qp_num; for
 *      MLX5_CQE_REQ the WQE's opcode gives wc->opcode (handle_good_req), for
 *      MLX5_CQE_REQ_ERR the syndrome gives the status and vendor_err_synd the vendor error
 *      (mlx5_handle_error_cqe); wqe_counter & (wqe_cnt - 1) indexes wq->wrid[] for the
 *      wr_id, and wq->tail = wq->wqe_head[idx] + 1;
 *   3. after the batch, dbrec[MLX5_CQ_SET_CI] = htobe32(cons_index & 0xffffff).
 * Left out, each of which would only make the C loop slower: the CQ spinlock and the stall
 * options (a single thread, stalling off), the resource lookup by QP number (one QP: its
 * number is compared), inline-scatter CQEs (never produced for RDMA WRITE), the lazy
 * (ibv_cq_ex) form, and the error-CQE dump to the debug file.
 *
 * c_reap_mlx5 calls poll_cq until `expected` completions are reaped (or the CQ stays empty
 * for a bounded number of polls), consuming each as the Rust loop does: the wr_ids summed,
 * the errors counted.
 */
#include <endian.h>
#include <stdint.h>

#include "bench_mlx5.h"

_Static_assert(sizeof(struct ibv_wc) == 48, "struct ibv_wc as the Rust side declares it");
_Static_assert(sizeof(struct mlx5_cqe64) == 64, "64-byte CQE");

struct bench_reaped {
	uint64_t n;
	uint64_t wr_id_sum;
	uint64_t errors;
};

struct bench_reaped c_reap_mlx5(struct bench_qp *qp, uint64_t expected, struct ibv_wc *wc,
				int ne);

enum { CQ_OK = 0, CQ_EMPTY = -1, CQ_POLL_ERR = -2 };

static inline enum ibv_wc_status handle_error_cqe(const struct mlx5_err_cqe *cqe)
{
	switch (cqe->syndrome) {
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
		return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
		return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
		return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
		return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR:
		return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
		return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
		return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
		return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
		return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
		return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
		return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
		return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
		return IBV_WC_REM_ABORT_ERR;
	default:
		return IBV_WC_GENERAL_ERR;
	}
}

static inline void handle_good_req(struct ibv_wc *wc, const struct mlx5_cqe64 *cqe)
{
	switch (be32toh(cqe->sop_drop_qpn) >> 24) {
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		wc->wc_flags |= IBV_WC_WITH_IMM;
		/* fall through */
	case MLX5_OPCODE_RDMA_WRITE:
		wc->opcode = IBV_WC_RDMA_WRITE;
		break;
	case MLX5_OPCODE_SEND_IMM:
		wc->wc_flags |= IBV_WC_WITH_IMM;
		/* fall through */
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_INVAL:
		wc->opcode = IBV_WC_SEND;
		break;
	case MLX5_OPCODE_RDMA_READ:
		wc->opcode = IBV_WC_RDMA_READ;
		wc->byte_len = be32toh(cqe->byte_cnt);
		break;
	default:
		break;
	}
}

static inline int poll_one(struct bench_qp *qp, struct ibv_wc *wc)
{
	struct bench_cq *cq = &qp->send_cq;
	struct bench_wq *wq = &qp->sq;
	struct mlx5_cqe64 *cqe64 = (struct mlx5_cqe64 *)cq->buf + (cq->cons_index & cq->cqe);
	uint32_t qpn;
	uint16_t wqe_ctr;
	unsigned idx;

	if (mlx5dv_get_cqe_opcode(cqe64) == MLX5_CQE_INVALID ||
	    ((cqe64->op_own & MLX5_CQE_OWNER_MASK) ^ !!(cq->cons_index & (cq->cqe + 1))))
		return CQ_EMPTY;
	++cq->cons_index;
	/* the entry's body is read only after its ownership byte */
	from_device_barrier();

	qpn = be32toh(cqe64->sop_drop_qpn) & 0xffffff;
	wc->wc_flags = 0;
	wc->qp_num = qpn;
	wqe_ctr = be16toh(cqe64->wqe_counter);
	switch (mlx5dv_get_cqe_opcode(cqe64)) {
	case MLX5_CQE_REQ:
		if (unlikely(qpn != qp->qp_num))
			return CQ_POLL_ERR;
		idx = wqe_ctr & (wq->wqe_cnt - 1);
		handle_good_req(wc, cqe64);
		if (unlikely(cqe64->op_own & (MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64)))
			return CQ_POLL_ERR;
		wc->wr_id = wq->wrid[idx];
		wc->status = IBV_WC_SUCCESS;
		wq->tail = wq->wqe_head[idx] + 1;
		break;
	case MLX5_CQE_REQ_ERR: {
		const struct mlx5_err_cqe *ecqe = (const struct mlx5_err_cqe *)cqe64;

		wc->status = handle_error_cqe(ecqe);
		wc->vendor_err = ecqe->vendor_err_synd;
		if (unlikely(qpn != qp->qp_num))
			return CQ_POLL_ERR;
		idx = wqe_ctr & (wq->wqe_cnt - 1);
		wc->wr_id = wq->wrid[idx];
		wq->tail = wq->wqe_head[idx] + 1;
		break;
	}
	default:
		return CQ_POLL_ERR;
	}
	return CQ_OK;
}

static inline int poll_cq(struct bench_qp *qp, int ne, struct ibv_wc *wc)
{
	struct bench_cq *cq = &qp->send_cq;
	int npolled;
	int err = CQ_OK;

	for (npolled = 0; npolled < ne; ++npolled) {
		err = poll_one(qp, wc + npolled);
		if (err != CQ_OK)
			break;
	}
	/* update_cons_index */
	cq->dbrec[BENCH_CQ_SET_CI] = htobe32(cq->cons_index & 0xffffff);
	return err == CQ_POLL_ERR ? err : npolled;
}

struct bench_reaped c_reap_mlx5(struct bench_qp *qp, uint64_t expected, struct ibv_wc *wc,
				int ne)
{
	struct bench_reaped r = { 0, 0, 0 };
	unsigned idle = 0;

	while (r.n < expected) {
		int n = poll_cq(qp, ne, wc);

		if (n < 0)
			break;
		if (n == 0 && ++idle > 1000000)
			break;
		for (int i = 0; i < n; i++) {
			r.wr_id_sum += wc[i].wr_id;
			r.errors += wc[i].status != IBV_WC_SUCCESS;
		}
		r.n += (unsigned)n;
	}
	return r;
}
