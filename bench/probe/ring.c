// bench/probe/ring.c: the descriptor ring of amigo's shared-memory adapter
// reduced to C, between two processes bound to a core each, to tell what
// the ring's layout costs from what amigo's code around it costs
// (bench/MID_PATH.md, "Copying out and giving back together" and after).
// Not part of CI.
//
//   gcc -O2 -mavx2 -o /tmp/ring bench/probe/ring.c
//   /tmp/ring MODE SIZE ITERS [CELLS [SLOTS [CHUNK]]]
//   e.g. /tmp/ring 3 32768 100000 16 8192 8192
//
// Modes: 0 ring of 64-byte slots, a header word a slot, the consumer
// copying a message out and then zeroing its slots' header words; 3 the
// same, copying CHUNK bytes at a time and zeroing as it goes (as
// ring.Reader.CopyOut does); 5 as 3, the producer publishing its progress
// within a message every CHUNK bytes and the consumer copying each chunk as
// soon as it is written; 1 cells with a flag each; 2 a ring without zeroing
// (lap-tagged headers; unsafe with arbitrary data, for comparison only).
// Environment: RCP the consumer's copy (0 AVX2 loop as Go's memmove, 1 REP
// MOVSB, 2 none, 3 glibc memcpy); SCP the producer's (0 AVX2, 1 REP MOVSB,
// 2 none); PFD bytes the consumer's AVX2 copy prefetches ahead (0 none),
// PFB how far (modes 3 and 5): 0 anywhere, 1 within the message, 2 up to
// the producer's published tail, 3 up to the end of the next descriptor
// when its header word is set (every descriptor of a run has the same
// size), never past the ring's end with 2 and 3; PFN bytes of the next
// descriptor prefetched at once, when its header word is set, before the
// message's last chunk is copied (PFW 0) or before its first (PFW 1);
// PH 1: the consumer gives slots back (publishes head) after every chunk;
// PARTS: each SIZE-byte message goes as PARTS descriptors of SIZE/PARTS
// bytes from and to halves (quarters...) of one SIZE-byte buffer.
// It prints GB/s (10^9 bytes) and microseconds a message.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <immintrin.h>
static inline void cp_avx2(void*d,const void*s,size_t n){char*D=d;const char*S=s;size_t i=0;
 for(;i+128<=n;i+=128){__m256i a=_mm256_loadu_si256((void*)(S+i)),b=_mm256_loadu_si256((void*)(S+i+32)),c=_mm256_loadu_si256((void*)(S+i+64)),e=_mm256_loadu_si256((void*)(S+i+96));
 _mm256_storeu_si256((void*)(D+i),a);_mm256_storeu_si256((void*)(D+i+32),b);_mm256_storeu_si256((void*)(D+i+64),c);_mm256_storeu_si256((void*)(D+i+96),e);}
 for(;i<n;i++)D[i]=S[i];}
static inline void cp_avx512(void*d,const void*s,size_t n){char*D=d;const char*S=s;size_t i=0;
 for(;i+256<=n;i+=256){__m512i a=_mm512_loadu_si512((void*)(S+i)),b=_mm512_loadu_si512((void*)(S+i+64)),c=_mm512_loadu_si512((void*)(S+i+128)),e=_mm512_loadu_si512((void*)(S+i+192));
 _mm512_storeu_si512((void*)(D+i),a);_mm512_storeu_si512((void*)(D+i+64),b);_mm512_storeu_si512((void*)(D+i+128),c);_mm512_storeu_si512((void*)(D+i+192),e);}
 for(;i<n;i++)D[i]=S[i];}
static inline void cp_movsb(void*d,const void*s,size_t n){asm volatile("rep movsb":"+D"(d),"+S"(s),"+c"(n)::"memory");}

static int SCP,RCP,PH; static long PFD; static int PFB; static size_t AV,AVC; static long PFN,PFW;
static inline void cp_avx2_pf(void*d,const void*s,size_t n){char*D=d;const char*S=s;size_t i=0;
 for(;i+128<=n;i+=128){ if(PFD && (!PFB || i+PFD+128<=(PFB>=2?AVC:n))){__builtin_prefetch(S+i+PFD,0,3);__builtin_prefetch(S+i+PFD+64,0,3);}
 __m256i a=_mm256_loadu_si256((void*)(S+i)),b=_mm256_loadu_si256((void*)(S+i+32)),c=_mm256_loadu_si256((void*)(S+i+64)),e=_mm256_loadu_si256((void*)(S+i+96));
 _mm256_storeu_si256((void*)(D+i),a);_mm256_storeu_si256((void*)(D+i+32),b);_mm256_storeu_si256((void*)(D+i+64),c);_mm256_storeu_si256((void*)(D+i+96),e);}
 for(;i<n;i++)D[i]=S[i];}
static void scp(void*d,const void*s,size_t n){ if(SCP==2) return; if(SCP) cp_movsb(d,s,n); else cp_avx2(d,s,n);} 
static void rcp(void*d,const void*s,size_t n){ if(RCP==2) return; if(RCP==3) { memcpy(d,s,n); return; } if(RCP) cp_movsb(d,s,n); else cp_avx2_pf(d,s,n);}
static size_t CH;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define LD(p) __atomic_load_n(p,__ATOMIC_ACQUIRE)
#define ST(p,v) __atomic_store_n(p,v,__ATOMIC_RELEASE)
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); PFB=getenv("PFB")?atoi(getenv("PFB")):0; PFN=getenv("PFN")?atol(getenv("PFN")):0; PFW=getenv("PFW")?atol(getenv("PFW")):0; PH=getenv("PH")?atoi(getenv("PH")):0; long PARTS=getenv("PARTS")?atol(getenv("PARTS")):1; PFD=getenv("PFD")?atol(getenv("PFD")):0; SCP=getenv("SCP")?atoi(getenv("SCP")):0; RCP=getenv("RCP")?atoi(getenv("RCP")):0; CH=argc>6?atol(argv[6]):4096; size_t full=atol(argv[2]); size_t size=full/PARTS; long iters=atol(argv[3])*PARTS;
  int ncells=argc>4?atoi(argv[4]):16; int nslots=argc>5?atoi(argv[5]):1024;
  size_t cellsz=(size+64+63)&~63UL;
  size_t shsz = 4096 + (mode==1? (size_t)ncells*cellsz : (size_t)nslots*64);
  char*sh=mmap(0,shsz,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  memset(sh,0,shsz);
  volatile uint64_t*tail=(uint64_t*)sh,*head=(uint64_t*)(sh+64),*done=(uint64_t*)(sh+128),*prog=(uint64_t*)(sh+192);
  char*base=sh+4096;
  pid_t p=fork();
  if(p==0){ // receiver
    pin(1); char*dst0=aligned_alloc(4096,full); memset(dst0,0,full);
    uint64_t pos=0; // slot position / message count
    for(long i=0;i<iters;i++){
      if(mode==1){
        char*c=base+(i%ncells)*cellsz; uint64_t*f=(uint64_t*)c;
        while(LD(f)==0) __builtin_ia32_pause();
        memcpy(dst0,c+64,size); ST(f,0);
      } else {
        char*dst=dst0+(i%PARTS)*size; uint64_t k=(8+size+63)/64;
        if(pos%nslots + k > (uint64_t)nslots){ // pad
          uint64_t*h=(uint64_t*)(base+(pos%nslots)*64);
          while(LD(h)==0) __builtin_ia32_pause();
          uint64_t pk=nslots-pos%nslots; if(mode==0||mode==3||mode==5) *h=0; pos+=pk; ST(head,pos);}
        uint64_t*h=(uint64_t*)(base+(pos%nslots)*64);
        if(mode==0||mode==3||mode==5){ while(LD(h)==0) __builtin_ia32_pause(); }
        else { while(LD(h)!=pos+1) __builtin_ia32_pause(); }
        if(mode==3||mode==5){ AV=(PFB==3? (LD((uint64_t*)(base+((pos+k)%nslots)*64))? (k+k)*64-8 : k*64-8) : (LD(tail)-pos)*64-8); if(pos%nslots*64+AV>(size_t)nslots*64) AV=(size_t)nslots*64-pos%nslots*64-8; size_t ch=CH; size_t off=0; uint64_t j=0;
          while(off<size){ size_t end=off+ch; if(end>size) end=size;
            if(mode==5) while(LD(prog) < (((uint64_t)i<<32) | end)) __builtin_ia32_pause();
            AVC=AV>off?AV-off:0;
            if(PFN && ((PFW==0 && end==size) || (PFW==1 && off==0))){ uint64_t np=pos+k; char*nh=base+(np%nslots)*64; if(LD((uint64_t*)nh)!=0 && np%nslots+PFN/64+1<=(uint64_t)nslots){ for(long q=0;q<PFN;q+=64) __builtin_prefetch(nh+q,0,3);} }
            rcp(dst+off,(char*)h+8+off,end-off); off=end;
            uint64_t m=(8+off)/64; if(off==size) m=k;
            for(;j<m;j++) *(uint64_t*)((char*)h+64*j)=0;
            if(PH && off<size) ST(head,pos+j); }
        } else {
        rcp(dst,(char*)h+8,size);
        if(mode==0) for(uint64_t j=0;j<k;j++) *(uint64_t*)((char*)h+64*j)=0; }
        pos+=k; ST(head,pos);
      }
    }
    ST(done,1); _exit(0);
  }
  pin(0); char*src0=aligned_alloc(4096,full); memset(src0,1,full);
  double t0=now(); uint64_t pos=0;
  for(long i=0;i<iters;i++){
    if(mode==1){
      char*c=base+(i%ncells)*cellsz; uint64_t*f=(uint64_t*)c;
      while(LD(f)!=0) __builtin_ia32_pause();
      memcpy(c+64,src0,size); ST(f,1);
    } else {
      char*src=src0+(i%PARTS)*size; uint64_t k=(8+size+63)/64;
      if(pos%nslots + k > (uint64_t)nslots){
        uint64_t pk=nslots-pos%nslots;
        while(pos+pk-LD(head)>(uint64_t)nslots) __builtin_ia32_pause();
        ST((uint64_t*)(base+(pos%nslots)*64), (mode==0||mode==3||mode==5)?1:pos+1); pos+=pk; }
      while(pos+k-LD(head)>(uint64_t)nslots) __builtin_ia32_pause();
      uint64_t*h=(uint64_t*)(base+(pos%nslots)*64);
      if(mode==5){ ST(h,1); ST(tail,pos+k); size_t off=0; while(off<size){ size_t end=off+CH; if(end>size) end=size;
          scp((char*)h+8+off,src+off,end-off); ST(prog, ((uint64_t)i<<32)|end); off=end; } pos+=k; }
      else { scp((char*)h+8,src,size); ST(h, (mode==0||mode==3)?1:pos+1); pos+=k; ST(tail,pos); }
    }
  }
  while(!LD(done)) __builtin_ia32_pause();
  double t=now()-t0; waitpid(p,0,0);
  printf("mode %d size %zu: %.1f GB/s  %.3f us/msg\n",mode,size,size*(double)iters/t/1e9,t/iters*1e6);
}
