# Sourced by scripts/gpu-check and scripts/gpu-check-apps (not run): Open MPI for a machine
# without one, from Debian's .debs unpacked into a prefix, and the settings every mpirun
# there needs.
#
# carried_mpi_env PREFIX: when PREFIX holds an unpacked Open MPI (`dpkg -x` of the .debs that
#   scripts/fetch-mpi-debs downloads), relocates it there (OPAL_PREFIX, PMIx's install prefix
#   and component path), puts its mpirun first on PATH and its libraries, OpenBLAS's and their
#   dependencies' on LD_LIBRARY_PATH. Without it the machine's own MPI is used. Either way it
#   sets the container settings: shared memory only, no CMA, no ssh launcher, root allowed,
#   no binding (each rank's OpenBLAS or GPU copies use the cores they need).
carried_mpi_env() {
  local p=$1
  if [ -x "$p/usr/bin/mpirun.openmpi" ]; then
    export OPAL_PREFIX=$p/usr PATH=$p/usr/bin:$PATH
    export PMIX_INSTALL_PREFIX=$p/usr/lib/x86_64-linux-gnu/pmix2
    export PMIX_MCA_mca_base_component_path=$p/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
    export LD_LIBRARY_PATH=$p/usr/lib/x86_64-linux-gnu/openblas-pthread:$p/usr/lib/x86_64-linux-gnu:$p/lib/x86_64-linux-gnu:$p/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    ln -sf mpirun.openmpi "$p/usr/bin/mpirun"
  fi
  export OMPI_MCA_plm=isolated OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_pcompress_base_silence_warning=1
}
