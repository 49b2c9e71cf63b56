/*
 * test_core_common.c - the helpers every module shares: splitmix64 against its published
 * reference outputs, and the two quantile definitions against hand arithmetic.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "loom/common.h"

Test(common, splitmix64_reference_outputs)
{
        /* the first outputs of the reference splitmix64.c from state 0 */
        uint64_t s = 0;
        cr_assert_eq(loom_splitmix64(&s), UINT64_C(0xE220A8397B1DCDAF));
        cr_assert_eq(loom_splitmix64(&s), UINT64_C(0x6E789E6AA1B965F4));
        cr_assert_eq(loom_splitmix64(&s), UINT64_C(0x06C45D188009454F));
        /* the stateless form is the output for that state */
        uint64_t t = 12345;
        cr_assert_eq(loom_mix64(12345), loom_splitmix64(&t));
        cr_assert_eq(loom_mix64(t), loom_splitmix64(&t));
}

Test(common, quantiles_by_hand)
{
        double v[] = {5, 1, 4, 2, 3};
        qsort(v, 5, sizeof *v, loom_cmp_double);
        cr_assert_eq(v[0], 1);
        cr_assert_eq(v[4], 5);
        /* linear: position q * (n - 1) */
        cr_assert_float_eq(loom_quantile(v, 5, 0.5), 3.0, 1e-12);
        cr_assert_float_eq(loom_quantile(v, 5, 0.95), 4.8, 1e-12);
        cr_assert_float_eq(loom_quantile(v, 5, 0.0), 1.0, 1e-12);
        cr_assert_float_eq(loom_quantile(v, 5, 1.0), 5.0, 1e-12);
        cr_assert_float_eq(loom_quantile(v, 1, 0.99), 1.0, 1e-12);
        /* nearest rank: the ceil(q * n)-th */
        cr_assert_eq(loom_quantile_rank(v, 5, 0.5), 3);
        cr_assert_eq(loom_quantile_rank(v, 5, 0.95), 5);
        cr_assert_eq(loom_quantile_rank(v, 5, 0.2), 1);
        cr_assert_eq(loom_quantile_rank(v, 5, 0.21), 2);
        cr_assert_eq(loom_quantile_rank(v, 5, 0.0), 1);
        cr_assert_eq(loom_quantile_rank(v, 4, 0.5), 2);
}
