/*
 * Reference posting loops for `cargo xtask bench post`, linked into the Rust benchmark so both
 * run side by side in one process.
 *
 * c_post_mlx5dv: builds RDMA WRITE WQEs with rdma-core's public mlx5dv.h helpers
 * (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg, struct mlx5_wqe_raddr_seg), following the
 * provider's post-send policy (ds = 2 + SGEs, wqebbs = ceil(ds/4), data segments wrap at the
 * ring end), then rings the doorbell as the provider's post_send_db does: compiler barrier
 * (udma_to_device_barrier on x86), doorbell record = htobe32(pi & 0xffff), sfence
 * (mmio_wc_start), then either a
 * BlueFlame copy of the single WQE or one 64-bit store of its first 8 bytes, then sfence
 * (mmio_flush_writes), and the BlueFlame half alternates.
 *
 * c_post_floor: the floor: the same number of bytes stored into the same ring slots with plain
 * 64-bit stores, and the same doorbell-record and doorbell stores, with nothing computed.
 */
#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

struct bench_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

#define compiler_barrier() asm volatile("" ::: "memory")
#define wc_flush() asm volatile("sfence" ::: "memory")

static inline void *slot(void *ring, uint32_t wqe_cnt, uint32_t idx)
{
	return (char *)ring + ((size_t)(idx & (wqe_cnt - 1)) << 6);
}

uint32_t c_post_mlx5dv(void *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec,
		       volatile uint64_t *bar, uint32_t bf_size, uint32_t pi, uint64_t n,
		       uint32_t batch, const struct bench_sge *sges, uint32_t nsge,
		       uint32_t qpn, uint64_t raddr, uint32_t rkey, int use_bf)
{
	char *qend = (char *)ring + ((size_t)wqe_cnt << 6);
	uint32_t bf_off = 0;

	while (n) {
		uint32_t nreq = n < batch ? (uint32_t)n : batch;
		void *last = NULL;
		uint8_t last_ds = 0;

		for (uint32_t r = 0; r < nreq; r++) {
			struct mlx5_wqe_ctrl_seg *ctrl = slot(ring, wqe_cnt, pi);
			struct mlx5_wqe_raddr_seg *rseg = (void *)(ctrl + 1);
			struct mlx5_wqe_data_seg *dseg = (void *)(rseg + 1);
			uint8_t ds = 2;
			uint8_t fm_ce_se = (r + 1 == nreq) ? MLX5_WQE_CTRL_CQ_UPDATE : 0;

			rseg->raddr = htobe64(raddr);
			rseg->rkey = htobe32(rkey);
			rseg->reserved = 0;
			for (uint32_t i = 0; i < nsge; i++) {
				if ((char *)dseg == qend)
					dseg = ring;
				if (!sges[i].length)
					continue;
				mlx5dv_set_data_seg(dseg, sges[i].length, sges[i].lkey,
						    (uintptr_t)sges[i].addr);
				dseg++;
				ds++;
			}
			/* the provider zeroes bytes 8..11 before filling the ctrl segment */
			*(uint32_t *)((char *)ctrl + 8) = 0;
			mlx5dv_set_ctrl_seg(ctrl, (uint16_t)pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn,
					    fm_ce_se, ds, 0, 0);
			last = ctrl;
			last_ds = ds;
			pi += (ds * 16 + 63) / 64;
		}

		compiler_barrier();
		dbrec[1] = htobe32(pi & 0xffff);
		wc_flush(); /* mmio_wc_start */
		if (use_bf && nreq == 1 && last_ds > 1 && last_ds <= bf_size / 16) {
			uint32_t bytes = (last_ds * 16 + 63) & ~63u;
			const char *src = last;
			volatile uint64_t *dst = (volatile uint64_t *)((volatile char *)bar + bf_off);
			for (uint32_t off = 0; off < bytes; off += 64) {
				const uint64_t *s = (const uint64_t *)src;
				for (int k = 0; k < 8; k++)
					dst[off / 8 + k] = s[k];
				src += 64;
				if (src == qend)
					src = ring;
			}
		} else {
			*(volatile uint64_t *)((volatile char *)bar + bf_off) = *(uint64_t *)last;
		}
		wc_flush();
		bf_off ^= bf_size;
		n -= nreq;
	}
	return pi;
}

uint32_t c_post_floor(void *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec,
		      volatile uint64_t *bar, uint32_t pi, uint64_t n, uint32_t batch,
		      uint32_t wqebbs_per_wqe, uint32_t bytes_per_wqe)
{
	uint64_t val = 0x0102030405060708ull;

	while (n) {
		uint32_t nreq = n < batch ? (uint32_t)n : batch;
		uint64_t *last = NULL;

		for (uint32_t r = 0; r < nreq; r++) {
			uint32_t words = bytes_per_wqe / 8;
			for (uint32_t w = 0; w < words; w++) {
				uint64_t *p = slot(ring, wqe_cnt, pi + w / 8);
				p[w % 8] = val;
			}
			last = slot(ring, wqe_cnt, pi);
			pi += wqebbs_per_wqe;
		}
		compiler_barrier();
		dbrec[1] = htobe32(pi & 0xffff);
		wc_flush(); /* mmio_wc_start */
		*bar = *last;
		wc_flush();
		n -= nreq;
	}
	return pi;
}
