/* The kernel tier's verbs program: runs in the guest, on the Linux kernel's mlx5_ib driving our
 * device model over vfio-user, through rdma-core's mlx5 provider (libmlx5). It creates the
 * objects a verbs application starts with (a PD, an MR, two CQs, an RC QP), each through the
 * provider's user rings and the kernel's commands to the model's firmware, checks each step,
 * destroys them in reverse order, and prints one line per step:
 *   verbs: <step> ok <details>      or      verbs: <step> FAILED: <why>
 * Exit status: 0 when every step passed, 1 otherwise, 2 when no mlx5 device was found.
 * Built on the host against the host's libibverbs headers (bookworm's rdma-core), linked
 * dynamically; the guest runs bookworm's rdma-core userspace. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

static int failures;

static void ok(const char *step, const char *fmt, ...)
{
	va_list ap;

	printf("verbs: %s ok", step);
	if (*fmt) {
		putchar(' ');
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	putchar('\n');
}

static void failed(const char *step, int err)
{
	printf("verbs: %s FAILED: %s (errno %d)\n", step, strerror(err), err);
	failures++;
}

static void check_destroy(const char *step, int rc)
{
	/* The destroy verbs return 0 or an errno value. */
	if (rc)
		failed(step, rc);
	else
		ok(step, "");
}

/* A QP buffer that does not start on a page: the parent domain's allocator below hands the
 * provider its QP buffer OFFSET_IN_PAGE bytes into a page-aligned block, as an application's
 * own allocator may place it. mlx5_ib then lists the buffer from its first page and tells the
 * device where the queue starts in `page_offset` (64ths of a page;
 * mlx5_umem_find_best_quantized_pgoff), the field a page-aligned buffer leaves 0. (A buffer in
 * a physically contiguous region can get the same from the kernel's choice of a larger page:
 * that is how a plain ibv_create_qp met it, by chance.) CQs must start on a page (the kernel
 * refuses an offset CQ buffer with EINVAL before any command), so they keep the default. */
#define OFFSET_IN_PAGE 0x400
#define MAX_OFFSET_BUFS 4

static struct {
	void *block;
	void *given;
} offset_bufs[MAX_OFFSET_BUFS];
static unsigned offset_allocs;

static void *offset_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			  uint64_t resource_type)
{
	(void)pd;
	(void)pd_context;
	(void)alignment;
	if (resource_type != MLX5DV_RES_TYPE_QP)
		return IBV_ALLOCATOR_USE_DEFAULT;
	for (int i = 0; i < MAX_OFFSET_BUFS; i++) {
		void *block;

		if (offset_bufs[i].block)
			continue;
		if (posix_memalign(&block, 4096, size + OFFSET_IN_PAGE))
			return NULL;
		memset(block, 0, size + OFFSET_IN_PAGE);
		offset_bufs[i].block = block;
		offset_bufs[i].given = (char *)block + OFFSET_IN_PAGE;
		offset_allocs++;
		return offset_bufs[i].given;
	}
	return NULL;
}

static void offset_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	(void)pd;
	(void)pd_context;
	(void)resource_type;
	for (int i = 0; i < MAX_OFFSET_BUFS; i++)
		if (offset_bufs[i].given == ptr) {
			free(offset_bufs[i].block);
			offset_bufs[i].block = NULL;
			offset_bufs[i].given = NULL;
		}
}

/* An RC QP whose buffer starts OFFSET_IN_PAGE into a page, through a parent domain of `pd`,
 * on a CQ of its own; created, checked and destroyed. */
static void offset_qp(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_parent_domain_init_attr pda = {
		.pd = pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
		.alloc = offset_alloc,
		.free = offset_free,
	};
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pda);
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qp = NULL;

	if (!parent) {
		failed("offset parent_domain", errno);
		return;
	}
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq) {
		failed("offset create_cq", errno);
		goto out;
	}
	ok("offset create_cq", "cqe %d", cq->cqe);
	struct ibv_qp_init_attr_ex qia = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = parent,
	};
	qp = ibv_create_qp_ex(ctx, &qia);
	if (!qp) {
		failed("offset create_qp rc", errno);
		goto out;
	}
	ok("offset create_qp rc", "qpn 0x%x", qp->qp_num);
	/* The QP's buffer came from the allocator, so it started inside a page. */
	if (offset_allocs != 1) {
		printf("verbs: offset buffer FAILED: %u allocated (the QP's buffer expected)\n",
		       offset_allocs);
		failures++;
	} else {
		ok("offset buffer", "the QP starts 0x%x into a page", OFFSET_IN_PAGE);
	}
out:
	if (qp)
		check_destroy("offset destroy_qp", ibv_destroy_qp(qp));
	if (cq)
		check_destroy("offset destroy_cq", ibv_destroy_cq(cq));
	check_destroy("offset dealloc_parent_domain", ibv_dealloc_pd(parent));
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = NULL;

	if (!list) {
		failed("get_device_list", errno);
		return 2;
	}
	for (int i = 0; i < n; i++)
		if (strncmp(ibv_get_device_name(list[i]), "mlx5_", 5) == 0)
			dev = list[i];
	if (!dev) {
		printf("verbs: no mlx5 device among %d\n", n);
		ibv_free_device_list(list);
		return 2;
	}
	printf("verbs: device %s\n", ibv_get_device_name(dev));
	if (!mlx5dv_is_supported(dev)) {
		printf("verbs: provider FAILED: %s is not served by the mlx5 provider\n",
		       ibv_get_device_name(dev));
		ibv_free_device_list(list);
		return 1;
	}
	ok("provider", "mlx5");

	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx) {
		failed("open_device", errno);
		ibv_free_device_list(list);
		return 1;
	}
	ok("open_device", "");

	struct ibv_device_attr attr;
	int rc = ibv_query_device(ctx, &attr);
	if (rc)
		failed("query_device", rc);
	else
		ok("query_device", "max_qp %d max_cqe %d max_mr_size 0x%llx", attr.max_qp,
		   attr.max_cqe, (unsigned long long)attr.max_mr_size);

	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_cq *scq = NULL, *rcq = NULL;
	struct ibv_qp *qp = NULL;
	size_t len = 64 * 1024;
	void *buf = NULL;

	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		failed("alloc_pd", errno);
		goto out;
	}
	ok("alloc_pd", "handle %u", pd->handle);

	if (posix_memalign(&buf, 4096, len)) {
		failed("buffer", ENOMEM);
		goto out;
	}
	memset(buf, 0x5a, len);
	mr = ibv_reg_mr(pd, buf, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	/* The CQs and the QP do not need the MR: go on without it, so that one run says
	 * as much as it can. */
	if (!mr)
		failed("reg_mr", errno);
	else
		ok("reg_mr", "lkey 0x%x rkey 0x%x", mr->lkey, mr->rkey);

	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!scq) {
		failed("create_cq send", errno);
		goto out;
	}
	ok("create_cq send", "cqe %d", scq->cqe);
	rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!rcq) {
		failed("create_cq recv", errno);
		goto out;
	}
	ok("create_cq recv", "cqe %d", rcq->cqe);

	struct ibv_qp_init_attr qia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	qp = ibv_create_qp(pd, &qia);
	if (!qp) {
		failed("create_qp rc", errno);
		goto out;
	}
	ok("create_qp rc", "qpn 0x%x state %d", qp->qp_num, qp->state);
	if (qp->qp_type != IBV_QPT_RC || qp->state != IBV_QPS_RESET) {
		printf("verbs: create_qp rc FAILED: type %d state %d (RC in RESET expected)\n",
		       qp->qp_type, qp->state);
		failures++;
	}
	offset_qp(ctx, pd);

out:
	if (qp)
		check_destroy("destroy_qp", ibv_destroy_qp(qp));
	if (rcq)
		check_destroy("destroy_cq recv", ibv_destroy_cq(rcq));
	if (scq)
		check_destroy("destroy_cq send", ibv_destroy_cq(scq));
	if (mr)
		check_destroy("dereg_mr", ibv_dereg_mr(mr));
	if (pd)
		check_destroy("dealloc_pd", ibv_dealloc_pd(pd));
	rc = ibv_close_device(ctx);
	if (rc)
		failed("close_device", errno);
	else
		ok("close_device", "");
	ibv_free_device_list(list);
	free(buf);
	printf("verbs: %d step(s) failed\n", failures);
	return failures ? 1 : 0;
}
