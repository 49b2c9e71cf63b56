/*
 * pool.c - the KV page pool of one GPU in real memory.
 *
 * ROSE decouples the virtual KV address space of each model from the physical pages behind it
 * (CUDA VMM: cuMemAddressReserve, cuMemCreate, cuMemMap). The same shape on the host: each model
 * reserves a contiguous range with mmap(PROT_NONE) that its attention kernels would index, the
 * physical pages are 2 MB slices of one memfd, and moving a page between the models is an
 * munmap-free MAP_FIXED remap: map the memfd slice read-write at the new address, replace the old
 * address with a fresh PROT_NONE mapping. Neither model's layout changes.
 *
 * Invariants: phys_of[model][v] is the physical page behind virtual page v or NONE; owner[p]
 * is the (model, v) that maps physical page p, or free; a free physical page is mapped nowhere.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/harvest.h"

struct loom_harvest_pool {
        int fd;
        uint32_t npages;
        uint64_t page;
        uint8_t *base[2];
        uint32_t *phys_of[2]; /* virtual page -> physical page */
        uint32_t *free_list;  /* stack of free physical pages */
        uint32_t nfree;
        uint32_t used[2];
};

int loom_harvest_pool_new(uint32_t npages, uint64_t page_bytes, loom_harvest_pool **out,
                          loom_err *e)
{
        long sys = sysconf(_SC_PAGESIZE);
        if (npages == 0)
                return loom_err_set(e, LOOM_EINVAL, "pages", "must be at least 1");
        if (page_bytes == 0 || sys <= 0 || page_bytes % (uint64_t)sys)
                return loom_err_set(e, LOOM_EINVAL, "page_bytes",
                                    "must be a positive multiple of %ld, got %llu", sys,
                                    (unsigned long long)page_bytes);
        loom_harvest_pool *p = calloc(1, sizeof *p);
        if (!p)
                return loom_err_set(e, LOOM_ENOMEM, "pool", "out of memory");
        p->fd = -1;
        p->base[0] = p->base[1] = MAP_FAILED;
        p->npages = npages;
        p->page = page_bytes;
        uint64_t len = (uint64_t)npages * page_bytes;
        p->phys_of[0] = malloc(npages * sizeof(uint32_t));
        p->phys_of[1] = malloc(npages * sizeof(uint32_t));
        p->free_list = malloc(npages * sizeof(uint32_t));
        if (!p->phys_of[0] || !p->phys_of[1] || !p->free_list) {
                loom_harvest_pool_free(p);
                return loom_err_set(e, LOOM_ENOMEM, "pool", "out of memory");
        }
        p->fd = memfd_create("loom-kv-pool", MFD_CLOEXEC);
        if (p->fd < 0 || ftruncate(p->fd, (off_t)len) != 0) {
                int err = errno;
                loom_harvest_pool_free(p);
                return loom_err_set(e, LOOM_EIO, "pool", "memfd of %llu bytes: %s",
                                    (unsigned long long)len, strerror(err));
        }
        for (int m = 0; m < 2; m++) {
                p->base[m] =
                    mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                if (p->base[m] == MAP_FAILED) {
                        int err = errno;
                        loom_harvest_pool_free(p);
                        return loom_err_set(e, LOOM_EIO, "pool", "reserve %llu bytes: %s",
                                            (unsigned long long)len, strerror(err));
                }
        }
        for (uint32_t i = 0; i < npages; i++) {
                p->phys_of[0][i] = p->phys_of[1][i] = LOOM_HARVEST_NONE;
                p->free_list[i] = npages - 1 - i; /* pop order 0, 1, 2, ... */
        }
        p->nfree = npages;
        *out = p;
        return 0;
}

void loom_harvest_pool_free(loom_harvest_pool *p)
{
        if (!p)
                return;
        for (int m = 0; m < 2; m++)
                if (p->base[m] != MAP_FAILED)
                        munmap(p->base[m], (size_t)p->npages * p->page);
        if (p->fd >= 0)
                close(p->fd);
        free(p->phys_of[0]);
        free(p->phys_of[1]);
        free(p->free_list);
        free(p);
}

static int valid_model(int model)
{
        return model == LOOM_HARVEST_SERVING || model == LOOM_HARVEST_ROLLOUT;
}

int loom_harvest_pool_map(loom_harvest_pool *p, int model, uint32_t *vpage, loom_err *e)
{
        if (!valid_model(model))
                return loom_err_set(e, LOOM_EINVAL, "model", "must be serving or rollout");
        if (p->nfree == 0)
                return loom_err_set(e, LOOM_ERANGE, "pool", "no free physical page");
        uint32_t v = 0;
        while (v < p->npages && p->phys_of[model][v] != LOOM_HARVEST_NONE)
                v++; /* npages free pages exist, so some virtual page is unmapped */
        uint32_t ph = p->free_list[p->nfree - 1];
        void *at = p->base[model] + (uint64_t)v * p->page;
        void *r = mmap(at, p->page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd,
                       (off_t)((uint64_t)ph * p->page));
        if (r == MAP_FAILED)
                return loom_err_set(e, LOOM_EIO, "pool", "map page: %s", strerror(errno));
        p->nfree--;
        p->phys_of[model][v] = ph;
        p->used[model]++;
        *vpage = v;
        return 0;
}

int loom_harvest_pool_unmap(loom_harvest_pool *p, int model, uint32_t vpage)
{
        if (!valid_model(model) || vpage >= p->npages ||
            p->phys_of[model][vpage] == LOOM_HARVEST_NONE)
                return LOOM_ENOENT;
        void *at = p->base[model] + (uint64_t)vpage * p->page;
        /* Replace, never munmap: the range stays reserved so nothing else lands inside it. */
        void *r = mmap(at, p->page, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED)
                return LOOM_EIO;
        p->free_list[p->nfree++] = p->phys_of[model][vpage];
        p->phys_of[model][vpage] = LOOM_HARVEST_NONE;
        p->used[model]--;
        return 0;
}

void *loom_harvest_pool_addr(const loom_harvest_pool *p, int model, uint32_t vpage)
{
        return p->base[model] + (uint64_t)vpage * p->page;
}

uint32_t loom_harvest_pool_phys(const loom_harvest_pool *p, int model, uint32_t vpage)
{
        if (!valid_model(model) || vpage >= p->npages)
                return LOOM_HARVEST_NONE;
        return p->phys_of[model][vpage];
}

uint32_t loom_harvest_pool_used(const loom_harvest_pool *p, int model)
{
        return valid_model(model) ? p->used[model] : 0;
}

uint32_t loom_harvest_pool_free_pages(const loom_harvest_pool *p)
{
        return p->nfree;
}

uint32_t loom_harvest_pool_pages(const loom_harvest_pool *p)
{
        return p->npages;
}
