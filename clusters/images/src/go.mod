// kdrill's own small programs for the offline kind images. Standard library only.
module kdrill.local/images

go 1.24
