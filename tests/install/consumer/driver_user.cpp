// Built, never run (CI has no driver): it links only if CUDA::nvrtc still brings the driver.
#include <cuda.h>
#include <nvrtc.h>

int main() {
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    return cuInit(0) == CUDA_SUCCESS && major > 0 ? 0 : 1;
}
