//! The routes a call can take, by their user-facing names (`OZAKI_ROUTE`, trace `route`).

use std::fmt;
use std::str::FromStr;

/// A way to compute one dgemm/dsyrk call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Route {
    /// The vendor CPU BLAS the program would have called without the shim.
    Vendor,
    /// The shim's own cache-blocked fp64 kernel, used when no vendor BLAS exists.
    Builtin,
    /// Ozaki scheme II emulation on the CPU (the exact reference route).
    CpuOzaki,
    /// cuBLAS fp64 on the GPU.
    GpuNative,
    /// Ozaki scheme II on the GPU's INT8 tensor cores.
    GpuOzaki,
}

impl Route {
    /// Every route, in the order reports list them.
    pub const ALL: [Route; 5] = [
        Route::Vendor,
        Route::Builtin,
        Route::CpuOzaki,
        Route::GpuNative,
        Route::GpuOzaki,
    ];

    /// The stable name used in traces and `OZAKI_ROUTE`.
    pub fn name(self) -> &'static str {
        match self {
            Route::Vendor => "vendor",
            Route::Builtin => "builtin",
            Route::CpuOzaki => "cpu-ozaki",
            Route::GpuNative => "gpu-native",
            Route::GpuOzaki => "gpu-ozaki",
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `OZAKI_ROUTE` asks for: one forced route, or the engine's choice per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteRequest {
    /// Let the per-record engine choose.
    Auto,
    /// Always use this route (falling back to the vendor BLAS on failure).
    Forced(Route),
}

/// An `OZAKI_ROUTE` value that names no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRoute(pub String);

impl fmt::Display for UnknownRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Route::ALL.iter().map(|r| r.name()).collect();
        write!(
            f,
            "unknown route {:?} (expected auto or one of: {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownRoute {}

impl FromStr for Route {
    type Err = UnknownRoute;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Route::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| UnknownRoute(s.to_string()))
    }
}

impl FromStr for RouteRequest {
    type Err = UnknownRoute;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            Ok(RouteRequest::Auto)
        } else {
            s.parse().map(RouteRequest::Forced)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_an_error() {
        for r in Route::ALL {
            assert_eq!(r.name().parse::<Route>().unwrap(), r);
        }
        assert_eq!("auto".parse::<RouteRequest>().unwrap(), RouteRequest::Auto);
        assert!(
            "gpu"
                .parse::<RouteRequest>()
                .unwrap_err()
                .to_string()
                .contains("gpu-ozaki")
        );
    }
}
