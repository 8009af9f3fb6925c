! A plain Fortran program calling DGEMM and DSYRK through the compiler's own calling
! convention (gfortran appends the hidden character-length arguments), linked with -lblas.
!
! Output as the C clients (tests/c/common.h): a "result" line per call with every element
! of C in hexadecimal (padding rows included, they must stay untouched) and an "expect"
! line describing the trace record the shim must write. ozaki-cli/tests/clients.rs runs it with
! and without the shim and compares.
program fclient
  implicit none
  integer, parameter :: dp = kind(1.0d0)
  character(len=1), parameter :: flags(3) = ['N', 'T', 'C']
  character(len=1), parameter :: uplos(2) = ['U', 'L']
  integer, parameter :: sizes(3, 5) = reshape([0, 3, 2,  1, 1, 1,  3, 2, 0,  5, 3, 4,  9, 7, 11], [3, 5])
  real(dp), parameter :: alphas(2) = [1.0_dp, -0.625_dp]
  real(dp), parameter :: betas(2) = [0.0_dp, 1.25_dp]
  real(dp), allocatable :: a(:, :), b(:, :), c(:, :)
  integer :: ita, itb, is, ia, ib, m, n, k, lda, ldb, ldc, calls, iu
  real(dp) :: alpha, beta

  calls = 0
  call random_init(.true., .false.)
  do ita = 1, 3
    do itb = 1, 3
      do is = 1, 5
        do ia = 1, 2
          do ib = 1, 2
            m = sizes(1, is); n = sizes(2, is); k = sizes(3, is)
            alpha = alphas(ia); beta = betas(ib)
            if (ita == 1) then
              lda = max(1, m) + 1
              allocate(a(lda, max(1, k)))
            else
              lda = max(1, k) + 2
              allocate(a(lda, max(1, m)))
            end if
            if (itb == 1) then
              ldb = max(1, k) + 1
              allocate(b(ldb, max(1, n)))
            else
              ldb = max(1, n) + 2
              allocate(b(ldb, max(1, k)))
            end if
            ldc = max(1, m) + 1
            allocate(c(ldc, max(1, n)))
            call random_number(a); call random_number(b); call random_number(c)
            call dgemm(flags(ita), flags(itb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
            write (*, '(a, 2a1, 3i4, 2es12.4, a)', advance='no') 'result dgemm ', flags(ita), flags(itb), &
                m, n, k, alpha, beta, ' c='
            call dump(c)
            write (*, '(a, 2(1x, a1), 6(1x, i0), 2(1x, es24.17), a)') 'expect dgemm_ dgemm col', &
                flags(ita), flags(itb), m, n, k, lda, ldb, ldc, alpha, beta, ' 0'
            deallocate(a, b, c)
            calls = calls + 1
          end do
        end do
      end do
    end do
  end do

  do iu = 1, 2
    do ita = 1, 3
      do is = 1, 5
        do ib = 1, 2
          n = sizes(1, is); k = sizes(3, is)
          alpha = alphas(ib); beta = betas(ib)
          if (ita == 1) then
            lda = max(1, n) + 3
            allocate(a(lda, max(1, k)))
          else
            lda = max(1, k) + 1
            allocate(a(lda, max(1, n)))
          end if
          ldc = max(1, n) + 2
          allocate(c(ldc, max(1, n)))
          call random_number(a); call random_number(c)
          call dsyrk(uplos(iu), flags(ita), n, k, alpha, a, lda, beta, c, ldc)
          write (*, '(a, 2a1, 2i4, 2es12.4, a)', advance='no') 'result dsyrk ', uplos(iu), flags(ita), &
              n, k, alpha, beta, ' c='
          call dump(c)
          write (*, '(a, 2(1x, a1), 6(1x, i0), 2(1x, es24.17), a)') 'expect dsyrk_ dsyrk col', &
              uplos(iu), flags(ita), n, n, k, lda, 0, ldc, alpha, beta, ' 0'
          deallocate(a, c)
          calls = calls + 1
        end do
      end do
    end do
  end do
  write (*, '(a, i0)') 'calls ', calls

contains

  ! Every element of x as the hexadecimal image of its 64 bits.
  subroutine dump(x)
    real(dp), intent(in) :: x(:, :)
    integer :: i, j
    do j = 1, size(x, 2)
      do i = 1, size(x, 1)
        write (*, '(z16.16)', advance='no') transfer(x(i, j), 0_8)
      end do
    end do
    write (*, *)
  end subroutine dump

end program fclient
