/*
 * The state the C reference loops of `cargo xtask bench post` and `cargo xtask bench poll`
 * keep for one RC QP and its send CQ: the fields of rdma-core's provider structures
 * (providers/mlx5/mlx5.h: struct mlx5_wq, struct mlx5_bf, struct mlx5_cq, struct mlx5_qp)
 * that its send path (qp.c _mlx5_post_send, post_send_db) and its requester poll path
 * (cq.c poll_cq, mlx5_parse_cqe) read and write, and nothing else. The structures are our
 * own; only their roles follow the provider.
 *
 * Everything here is compiled the way Debian builds rdma-core (see build.rs).
 */
#ifndef RDMA_PMD_BENCH_MLX5_H
#define RDMA_PMD_BENCH_MLX5_H

#include <stdint.h>
#include <infiniband/mlx5dv.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* udma_to_device_barrier on x86_64 (util/udma_barrier.h): the compiler's only. */
#define to_device_barrier() asm volatile("" ::: "memory")
/* udma_from_device_barrier on x86_64. */
#define from_device_barrier() asm volatile("lfence" ::: "memory")
/* mmio_wc_start and mmio_flush_writes on x86_64. */
#define wc_sfence() asm volatile("sfence" ::: "memory")

/* The doorbell record's consumer-index word (MLX5_CQ_SET_CI in providers/mlx5/mlx5.h). */
enum { BENCH_CQ_SET_CI = 0 };

/* Same layout as the Rust core's `Sge` and as `struct ibv_sge`. */
struct bench_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* struct mlx5_wq, send side. */
struct bench_wq {
	uint64_t *wrid;     /* wr_id of the WQE starting at each block */
	unsigned *wqe_head; /* `head + nreq` when that WQE was posted */
	unsigned wqe_cnt;   /* blocks, a power of two */
	unsigned max_post;
	unsigned head;      /* work requests posted */
	unsigned tail;      /* work requests retired */
	unsigned cur_post;  /* next free block (free-running) */
	int max_gs;
	void *start;        /* sq_start */
	void *qend;
};

/* struct mlx5_bf: the BlueFlame register and its half. */
struct bench_bf {
	volatile char *reg;
	unsigned offset;
	unsigned buf_size;
};

/* struct mlx5_cq, 64-byte CQEs. */
struct bench_cq {
	void *buf;
	unsigned cqe; /* entries - 1 (verbs_cq.cq.cqe) */
	uint32_t cons_index;
	volatile uint32_t *dbrec;
};

struct bench_qp {
	struct bench_wq sq;
	struct bench_bf bf;
	volatile uint32_t *db; /* the QP's doorbell record */
	uint32_t qp_num;
	uint8_t sq_signal_bits;
	int prefer_bf;
	int max_inline_data;
	struct bench_cq send_cq;
};

#endif
