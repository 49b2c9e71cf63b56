"""What the GPU steps need from torch: cuda_torch() is torch when it sees a CUDA device, else None
after printing the reason the step is skipped."""


def cuda_torch():
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not importable")
        return None
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return None
    return torch
